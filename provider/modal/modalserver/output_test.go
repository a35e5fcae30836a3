package modalserver

import (
	"bytes"
	"context"
	"testing"
	"time"
	"unicode/utf8"
)

// TestOutputWindow: a window keeps what no reader has passed, makes its writer wait
// when full, and lets it go on as a reader takes bytes; an offset already passed is
// an error, not a silent jump.
func TestOutputWindow(t *testing.T) {
	o := newOutput(8, false)
	if n, err := o.Write([]byte("01234567")); n != 8 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	wrote := make(chan struct{})
	go func() {
		o.Write([]byte("89"))
		o.close()
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("a write past the window did not wait for a reader")
	case <-time.After(50 * time.Millisecond):
	}
	ctx := t.Context()
	chunk, start, _, err := o.read(ctx, 0, 4)
	if string(chunk) != "0123" || start != 0 || err != nil {
		t.Fatalf("read(0) = %q, %d, %v", chunk, start, err)
	}
	var got []byte
	for off := uint64(4); ; {
		chunk, _, eof, err := o.read(ctx, off, 4)
		if err != nil {
			t.Fatal(err)
		}
		if eof {
			break
		}
		got = append(got, chunk...)
		off += uint64(len(chunk))
	}
	<-wrote
	if string(got) != "456789" {
		t.Errorf("read the rest = %q, want %q", got, "456789")
	}
	if _, _, _, err := o.read(ctx, 2, 4); err == nil {
		t.Errorf("read at an offset already passed succeeded")
	}
}

// FuzzOutputRing: whatever is written, a ring holds at most its size, a read returns
// the bytes written at the offset it reports, and a reader behind the ring resumes at
// its oldest byte.
func FuzzOutputRing(f *testing.F) {
	f.Add([]byte("hello world"), uint8(4), uint8(3))
	f.Add(bytes.Repeat([]byte("x"), 100), uint8(7), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, size, cut uint8) {
		max := int(size%32) + 1
		o := newOutput(max, true)
		var all []byte
		for i := 0; i < len(data); i += int(cut%8) + 1 {
			part := data[i:min(len(data), i+int(cut%8)+1)]
			o.Write(part)
			all = append(all, part...)
			if o.held() > max {
				t.Fatalf("ring holds %d bytes, more than %d", o.held(), max)
			}
		}
		o.close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for off := uint64(0); ; {
			chunk, start, eof, err := o.read(ctx, off, 5)
			if err != nil {
				t.Fatal(err)
			}
			if eof {
				if start != uint64(len(all)) {
					t.Fatalf("EOF at %d of %d", start, len(all))
				}
				return
			}
			if start < off || !bytes.Equal(chunk, all[start:start+uint64(len(chunk))]) {
				t.Fatalf("read(%d) = %q at %d; written there: %q", off, chunk, start, all[start:])
			}
			off = start + uint64(len(chunk))
		}
	})
}

// FuzzCompleteRunes: the cut is a prefix that ends on a rune boundary whenever the
// input has one before its last bytes.
func FuzzCompleteRunes(f *testing.F) {
	f.Add([]byte("héllo"))
	f.Add([]byte{0xe2, 0x82})
	f.Fuzz(func(t *testing.T, b []byte) {
		got := completeRunes(b)
		if !bytes.HasPrefix(b, got) || len(b)-len(got) > utf8.UTFMax-1 {
			t.Fatalf("completeRunes(%q) = %q", b, got)
		}
		if utf8.Valid(b) && !bytes.Equal(got, b) {
			t.Fatalf("completeRunes cut valid UTF-8 %q to %q", b, got)
		}
	})
}
