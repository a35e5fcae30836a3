package services

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// writeRecorder records each write it gets.
type writeRecorder struct{ writes [][]byte }

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func TestCharWriter(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		writes []string // what reaches the log, write by write
	}{
		{"ascii", []string{"ab", "c"}, []string{"ab", "c"}},
		{"split two-byte", []string{"a\xc3", "\xa9b"}, []string{"a", "\xc3\xa9b"}},
		{"split four-byte thrice", []string{"\xf0", "\x9f", "\x8e", "\x89!"}, []string{"\xf0\x9f\x8e\x89!"}},
		{"held at the end", []string{"x\xe2\x82"}, []string{"x", "\uFFFD\uFFFD"}},
		{"invalid passes through", []string{"a\xff", "\x80b"}, []string{"a\xff", "\x80b"}},
		{"leader then ascii", []string{"a\xe2", "b"}, []string{"a", "\xe2b"}},
		{"overlong leader is not held", []string{"a\xc0"}, []string{"a\xc0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec writeRecorder
			cw := newCharWriter(&rec)
			for _, c := range tt.chunks {
				if n, err := cw.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("Write(%q) = %d, %v, want %d, nil", c, n, err, len(c))
				}
			}
			if err := cw.Finish(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range rec.writes {
				got = append(got, string(w))
			}
			if strings.Join(got, "|") != strings.Join(tt.writes, "|") {
				t.Errorf("writes = %q, want %q", got, tt.writes)
			}
		})
	}
}

// FuzzCharWriter: whatever the chunking, no write but the last ends inside a
// character of the log, and the log equals the input with only an incomplete character
// at its very end replaced.
func FuzzCharWriter(f *testing.F) {
	f.Add([]byte("héllo ✓ 🎉\n"), []byte{1, 2, 3})
	f.Add([]byte("🎉🎉\xe2\x82"), []byte{3, 1})
	f.Add([]byte("\xff\xc3\xf0\x9f"), []byte{0})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		var rec writeRecorder
		cw := newCharWriter(&rec)
		for i, rest := 0, data; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(1+int(cuts[i%len(cuts)])%7, len(rest))
			}
			cw.Write(rest[:n])
			rest = rest[n:]
		}
		writes := len(rec.writes)
		cw.Finish()
		var log []byte
		ends := map[int]bool{}
		for i, w := range rec.writes {
			log = append(log, w...)
			if i < writes {
				ends[len(log)] = true
			}
		}
		// Every write but the last ends where a character of the log ends.
		for i := 0; i < len(log); {
			_, size := utf8.DecodeRune(log[i:])
			for j := i + 1; j < i+size; j++ {
				if ends[j] {
					t.Fatalf("a write ends at %d, inside the character at %d of %q", j, i, log)
				}
			}
			i += size
		}
		tail := incompleteTail(data)
		want := append(bytes.Clone(data[:len(data)-tail]), bytes.Repeat([]byte(string(utf8.RuneError)), tail)...)
		if !bytes.Equal(log, want) {
			t.Fatalf("log of %q = %q, want %q", data, log, want)
		}
	})
}

// TestLogNeverEndsMidCharacter runs services that print half a character:
// while the service pauses, the log ends before it; when the rest comes the
// character is whole; when the run ends first, it is U+FFFD.
func TestLogNeverEndsMidCharacter(t *testing.T) {
	m := newTestManager(t, Config{})
	logOf := func(name string) []byte {
		b, _ := os.ReadFile(filepath.Join(m.cfg.StateDir, "logs", name+".log"))
		return b
	}
	start(t, m, apitype.StartServiceRequest{Name: "split", Command: `printf 'a\xe2\x82'; sleep 1; printf '\xac b\n'; sleep 60`})
	waitFor(t, "the first half", 10*time.Second, func() bool { return bytes.HasSuffix(logOf("split"), []byte("\n\na")) })
	time.Sleep(300 * time.Millisecond)
	if b := logOf("split"); !bytes.HasSuffix(b, []byte("\n\na")) {
		t.Fatalf("log while the character is half written ends %q, want it to end before the character", b[max(0, len(b)-10):])
	}
	waitFor(t, "the whole character", 10*time.Second, func() bool { return bytes.HasSuffix(logOf("split"), []byte("a€ b\n")) })

	start(t, m, apitype.StartServiceRequest{Name: "cut", Command: `printf 'x\xe2\x82'`})
	waitFor(t, "the run to end", 10*time.Second, func() bool { return status(m, "cut") == apitype.StatusStopped })
	if b := logOf("cut"); !bytes.HasSuffix(b, []byte("x\uFFFD\uFFFD")) {
		t.Errorf("log of a run that ended mid-character ends %q, want x and two U+FFFD", b[max(0, len(b)-10):])
	}
}
