package logtail

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTail(t *testing.T) {
	tests := []struct {
		name          string
		log2, log1    string // rotated files; "" means absent
		log           string
		n             int
		want          []string
		skipCurrent   bool
		wantNotExists bool
	}{
		{name: "empty", log: "", n: 5, want: []string{}},
		{name: "final newline adds no line", log: "a\nb\n", n: 5, want: []string{"a", "b"}},
		{name: "no final newline", log: "a\nb", n: 5, want: []string{"a", "b"}},
		{name: "last n", log: "1\n2\n3\n4\n", n: 2, want: []string{"3", "4"}},
		{name: "one", log: "1\n2\n3", n: 1, want: []string{"3"}},
		{name: "empty lines kept", log: "\n\nx\n\n", n: 3, want: []string{"", "x", ""}},
		{name: "only a newline", log: "\n", n: 3, want: []string{""}},
		{name: "reaches into .log.1", log1: "a\nb\n", log: "c\n", n: 2, want: []string{"b", "c"}},
		{name: "line split across rotation", log1: "a\nhel", log: "lo\n", n: 2, want: []string{"a", "hello"}},
		{name: "reaches into .log.2", log2: "x\ny\n", log1: "z\n", log: "w\n", n: 3, want: []string{"y", "z", "w"}},
		{name: "all of everything", log2: "x\n", log1: "y\n", log: "z\n", n: 10, want: []string{"x", "y", "z"}},
		{name: "current missing", log1: "y\n", n: 10, want: []string{"y"}, skipCurrent: true},
		{name: "crlf and utf8 kept", log: "é\r\n🎉\n", n: 2, want: []string{"é\r", "🎉"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDir(t, Options{})
			for gen, s := range map[int]string{2: tt.log2, 1: tt.log1} {
				if s != "" {
					appendFile(t, d.path("svc", gen), s)
				}
			}
			if !tt.skipCurrent {
				appendFile(t, d.path("svc", 0), tt.log)
			}
			got, err := d.Tail("svc", tt.n)
			if err != nil {
				t.Fatalf("Tail(%q, %d): %v", "svc", tt.n, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Tail(%q, %d) (-want +got):\n%s", "svc", tt.n, diff)
			}
		})
	}
}

func TestTailLongLog(t *testing.T) {
	d := newDir(t, Options{})
	var sb strings.Builder
	for i := range 50000 {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	appendFile(t, d.path("svc", 0), sb.String())
	got, err := d.Tail("svc", 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10000 || got[0] != "line 40000" || got[9999] != "line 49999" {
		t.Fatalf("Tail(svc, 10000) = %d lines from %q to %q, want 10000 from %q to %q", len(got), got[0], got[len(got)-1], "line 40000", "line 49999")
	}
}

func TestTailBounded(t *testing.T) {
	d := newDir(t, Options{})
	appendFile(t, d.path("svc", 0), "first\n"+strings.Repeat("y", MaxTailBytes+100)+"\nlast\n")
	got, err := d.Tail("svc", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1] != "last" || len(got[0]) != MaxTailBytes-len("\nlast\n") {
		t.Fatalf("Tail of a log with a huge line = %d lines, want the cut huge line and %q", len(got), "last")
	}
}
