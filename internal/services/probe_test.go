package services

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The log probe matches what was appended since the run started, across
// checks that find nothing new and across a rotation.
func TestLogProbe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.log")
	write := func(flag int, s string) {
		t.Helper()
		f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write(os.O_TRUNC, "ready from the previous run\n")
	re := regexp.MustCompile(`(?m)^listening on \d+$`)
	p := &logProbe{path: path, offset: int64(len("ready from the previous run\n"))}

	if err := p.check(re); err == nil {
		t.Fatal("check before any output = nil, want no match")
	}
	write(os.O_APPEND, "starting\nlisten")
	for i := range 2 { // the second finds nothing new
		if err := p.check(re); err == nil {
			t.Fatalf("check %d of a half-written line = nil, want no match", i)
		}
	}
	write(os.O_APPEND, "ing on 3000\n")
	if err := p.check(re); err != nil {
		t.Fatalf("check after the line was completed = %v, want a match", err)
	}

	// Rotated: the new, shorter file is read from its start.
	p = &logProbe{path: path, offset: 1 << 20}
	write(os.O_TRUNC, "listening on 4000\n")
	if err := p.check(re); err != nil {
		t.Fatalf("check after rotation = %v, want a match", err)
	}
}
