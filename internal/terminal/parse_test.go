package terminal

import (
	"bytes"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestCompletePrefix(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"é", 2},
		{"a\xc3", 1},
		{"€", 3},
		{"a\xe2\x82", 1},
		{"a\xe2", 1},
		{"𝄞", 4},
		{"a\xf0\x9d\x84", 1},
		{"a\xf0\x9d", 1},
		{"a\xf0", 1},
		{"\x80\x80\x80\x80", 4}, // invalid: never held back
		{"a\xff", 2},
		{"é\x80", 3},
	}
	for _, tt := range tests {
		if got := completePrefix([]byte(tt.in)); got != tt.want {
			t.Errorf("completePrefix(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func FuzzCompletePrefix(f *testing.F) {
	for _, s := range []string{"", "abc", "a\xe2\x82", "𝄞x", "\xf0\x9d\x84", "\xff\xfe"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		n := completePrefix(p)
		if n < len(p)-utf8MaxContinuation || n > len(p) {
			t.Fatalf("completePrefix(%q) = %d, out of range", p, n)
		}
		if utf8.Valid(p) && !utf8.Valid(p[:n]) {
			t.Fatalf("completePrefix(%q) = %d cuts a valid string mid-character", p, n)
		}
		// What is held back is an incomplete character.
		if n < len(p) && utf8.FullRune(p[n:]) {
			t.Fatalf("completePrefix(%q) = %d holds back a complete rune %q", p, n, p[n:])
		}
	})
}

func TestRing(t *testing.T) {
	r := newRing(8)
	r.write([]byte("abcde"))
	r.write([]byte("fghij"))
	if r.start() != 2 || r.end != 10 {
		t.Fatalf("ring start, end = %d, %d, want 2, 10", r.start(), r.end)
	}
	buf := make([]byte, 16)
	n := r.read(buf, 2)
	if got := string(buf[:n]); got != "cdefghij" {
		t.Errorf("read(2) = %q, want cdefghij", got)
	}
	n = r.read(buf, 7)
	if got := string(buf[:n]); got != "hij" {
		t.Errorf("read(7) = %q, want hij", got)
	}
	r.write([]byte("0123456789ABC")) // longer than the ring
	n = r.read(buf, r.start())
	if got := string(buf[:n]); got != "56789ABC" || r.end != 23 {
		t.Errorf("after a long write: read = %q end %d, want 56789ABC 23", got, r.end)
	}
}

func TestRingBoundaryAndCut(t *testing.T) {
	r := newRing(8)
	r.write([]byte("ab€€")) // 2 + 3 + 3 bytes, then one more € overwrites
	r.write([]byte("€"))
	// The ring now starts inside the first €.
	start := r.boundary(r.start())
	buf := make([]byte, 16)
	n := r.read(buf, start)
	if got := string(buf[:n]); got != "€€" {
		t.Errorf("read from boundary = %q, want €€", got)
	}
	// A read that cannot take a whole character stops before it.
	small := make([]byte, 4)
	n = r.read(small, start)
	if got := string(small[:n]); got != "€" {
		t.Errorf("short read = %q, want €", got)
	}
}

func TestParseInit(t *testing.T) {
	in := Init{Session: "abc-1.2_3", Cols: 120, Rows: 40, Offset: 1 << 40}
	got, err := ParseInit(AppendInit(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("ParseInit(AppendInit(%+v)) (-want +got):\n%s", in, diff)
	}
	bad := map[string][]byte{
		"empty":      nil,
		"no id":      AppendInit(nil, Init{Cols: 1, Rows: 1}),
		"bad id":     AppendInit(nil, Init{Session: "a/b", Cols: 1, Rows: 1}),
		"long id":    AppendInit(nil, Init{Session: string(bytes.Repeat([]byte("a"), 65)), Cols: 1, Rows: 1}),
		"zero rows":  AppendInit(nil, Init{Session: "a", Cols: 1}),
		"wrong type": append([]byte{FrameInput}, AppendInit(nil, Init{Session: "a", Cols: 1, Rows: 1})[1:]...),
	}
	for name, p := range bad {
		if _, err := ParseInit(p); err == nil {
			t.Errorf("ParseInit(%s %q) = nil error, want an error", name, p)
		}
	}
}

func FuzzParseFrames(f *testing.F) {
	f.Add(AppendInit(nil, Init{Session: "s", Cols: 80, Rows: 24, Offset: 5}))
	f.Add(AppendInput(nil, 7, []byte("ls\r")))
	f.Add(AppendResize(nil, 80, 24))
	f.Add([]byte(`{"type":"resize","cols":10,"rows":5}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		if in, err := ParseInit(p); err == nil {
			if got, err := ParseInit(AppendInit(nil, in)); err != nil || got != in {
				t.Fatalf("init round trip of %q: %+v, %v", p, got, err)
			}
		}
		if fr, err := parseClientFrame(p); err == nil && fr.typ == FrameResize && (fr.cols == 0 || fr.rows == 0) {
			t.Fatalf("parseClientFrame(%q) accepted a zero size", p)
		}
		if cols, rows, ok := v1Resize(p); ok && (cols == 0 || rows == 0) {
			t.Fatalf("v1Resize(%q) = %d, %d", p, cols, rows)
		}
	})
}

func TestV1Resize(t *testing.T) {
	tests := []struct {
		in         string
		cols, rows uint16
		ok         bool
	}{
		{`{"type":"resize","cols":100,"rows":30}`, 100, 30, true},
		{`{"type":"resize","cols":0,"rows":-5}`, 1, 1, true},
		{`{"type":"resize","cols":1e9,"rows":30.7}`, 65535, 30, true},
		{`{"type":"resize","cols":"100","rows":30}`, 0, 0, false},
		{`{"type":"resize","cols":100}`, 0, 0, false},
		{`{"type":"other","cols":100,"rows":30}`, 0, 0, false},
		{`ls -la`, 0, 0, false},
		{`{`, 0, 0, false},
	}
	for _, tt := range tests {
		cols, rows, ok := v1Resize([]byte(tt.in))
		if cols != tt.cols || rows != tt.rows || ok != tt.ok {
			t.Errorf("v1Resize(%q) = %d, %d, %v, want %d, %d, %v", tt.in, cols, rows, ok, tt.cols, tt.rows, tt.ok)
		}
	}
}
