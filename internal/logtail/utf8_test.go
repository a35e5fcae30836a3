package logtail

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitIncomplete(t *testing.T) {
	tests := []struct {
		in, complete, rest string
	}{
		{"", "", ""},
		{"abc", "abc", ""},
		{"a\xc3", "a", "\xc3"},
		{"a\xc3\xa9", "a\xc3\xa9", ""},
		{"a\xe2\x82", "a", "\xe2\x82"},
		{"a\xe2", "a", "\xe2"},
		{"\xf0\x9f\x8e", "", "\xf0\x9f\x8e"},
		{"\xf0\x9f\x8e\x89", "\xf0\x9f\x8e\x89", ""},
		{"a\xe0\x80", "a\xe0\x80", ""}, // invalid second byte: never completes
		{"a\xed\xa0", "a\xed\xa0", ""}, // surrogate: invalid
		{"a\xf5", "a\xf5", ""},         // not a leading byte
		{"a\xc0", "a\xc0", ""},         // overlong leader
		{"a\x80\x80\x80", "a\x80\x80\x80", ""},
		{"\xe2\x82\xac\xe2", "\xe2\x82\xac", "\xe2"},
	}
	for _, tt := range tests {
		c, r := splitIncomplete([]byte(tt.in))
		if string(c) != tt.complete || string(r) != tt.rest {
			t.Errorf("splitIncomplete(%q) = %q, %q, want %q, %q", tt.in, c, r, tt.complete, tt.rest)
		}
	}
}

func TestToValid(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"héllo", "héllo"},
		{"a\xffb", "a\uFFFDb"},
		{"\xe2\x82", "\uFFFD\uFFFD"},
		{"\uFFFD", "\uFFFD"},
	}
	for _, tt := range tests {
		if got := toValid([]byte(tt.in)); got != tt.want {
			t.Errorf("toValid(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzUTF8Stream cuts data into pieces (sizes taken from cuts) and pushes them
// through a utf8Stream: every result is valid UTF-8, and together with the
// final flush they equal the whole input decoded at once (the input itself
// when it is valid UTF-8).
func FuzzUTF8Stream(f *testing.F) {
	f.Add([]byte("héllo wörld ✓ 🎉\n"), []byte{1, 2, 3})
	f.Add([]byte("🎉🎉🎉"), []byte{2, 1, 5})
	f.Add([]byte("a\xe2\x82\xffb\xf0\x9f"), []byte{1})
	f.Add([]byte("\xed\xa0\x80\xc0\xaf"), []byte{0, 1})
	f.Add([]byte(""), []byte{})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		var u utf8Stream
		var sb strings.Builder
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(1+int(cuts[i%len(cuts)])%8, len(rest))
			}
			s := u.push(rest[:n])
			if !utf8.ValidString(s) {
				t.Fatalf("push(%q) = %q, not valid UTF-8", rest[:n], s)
			}
			sb.WriteString(s)
			rest = rest[n:]
			if len(u.pending) >= utf8MaxLen {
				t.Fatalf("holding %d bytes %q, want fewer than %d", len(u.pending), u.pending, utf8MaxLen)
			}
		}
		s := u.flush()
		if !utf8.ValidString(s) {
			t.Fatalf("flush() = %q, not valid UTF-8", s)
		}
		sb.WriteString(s)
		if want := toValid(data); sb.String() != want {
			t.Fatalf("pieces of %q = %q, want %q", data, sb.String(), want)
		}
		if utf8.Valid(data) && sb.String() != string(data) {
			t.Fatalf("pieces of valid %q = %q, want the input", data, sb.String())
		}
	})
}
