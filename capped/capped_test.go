package capped

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	b := &Buffer{Max: 5}
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want all of it, nil", s, n, err)
		}
	}
	if b.String() != "abcde" || b.Len() != 5 {
		t.Errorf("kept %q (%d), want %q", b.String(), b.Len(), "abcde")
	}
	// Concurrent writers (race detector) never keep more than Max.
	c := &Buffer{Max: 1000}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				_, _ = c.Write([]byte("0123456789"))
			}
		})
	}
	wg.Wait()
	if c.Len() != 1000 {
		t.Errorf("concurrent writes kept %d bytes, want 1000", c.Len())
	}
}

func TestWriter(t *testing.T) {
	var out bytes.Buffer
	w := &Writer{W: &out, Left: 5}
	if n, err := w.Write([]byte("abc")); n != 3 || err != nil || w.Over {
		t.Fatalf("Write within the limit = %d, %v, over %v", n, err, w.Over)
	}
	if n, err := w.Write([]byte("def")); n != 0 || !errors.Is(err, ErrLimit) || !w.Over {
		t.Fatalf("Write past the limit = %d, %v, over %v; want 0, ErrLimit, over", n, err, w.Over)
	}
	if n, err := w.Write([]byte("de")); n != 2 || err != nil || out.String() != "abcde" || w.Left != 0 {
		t.Errorf("Write up to the limit = %d, %v, out %q, left %d", n, err, out.String(), w.Left)
	}
}
