package coderun

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadTail(t *testing.T) {
	tests := []struct {
		name       string
		s          string
		n          int
		whole      bool
		head, tail string
	}{
		{"fits", "hello", 10, true, "", ""},
		{"exactly", strings.Repeat("a", 300), 300, true, "", ""},
		{"cut", strings.Repeat("a", 1000) + strings.Repeat("z", 1000), 500, false, "aaaa", "zzzz"},
		{"runes", strings.Repeat("é", 1000), 400, false, "é", "é"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := headTail(tt.s, tt.n, "/workspace/.coderun/out.stdout.txt")
			if tt.whole {
				if got != tt.s {
					t.Errorf("headTail(%d bytes, %d) = %q, want it whole", len(tt.s), tt.n, got)
				}
				return
			}
			if len(got) > tt.n+len("/workspace/.coderun/out.stdout.txt")+100 || !strings.HasPrefix(got, tt.head) || !strings.HasSuffix(got, tt.tail) ||
				!strings.Contains(got, "bytes left out here; the whole is in /workspace/.coderun/out.stdout.txt") || !utf8.ValidString(got) {
				t.Errorf("headTail(%d bytes, %d) = %q", len(tt.s), tt.n, got)
			}
		})
	}
}

func FuzzHeadTail(f *testing.F) {
	f.Add("hello world", 5)
	f.Add(strings.Repeat("日本", 500), 300)
	f.Add("\xff\xfe"+strings.Repeat("x", 400), 250)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n%4096 + 4096
		if n < 0 {
			n = -n
		}
		got := headTail(s, n, "f")
		if len(s) <= n && got != s {
			t.Fatalf("headTail(%q, %d) = %q, want it whole", s, n, got)
		}
		if len(got) > max(n, len(s)) && len(got) > n+100 {
			t.Fatalf("headTail(%d bytes, %d) = %d bytes", len(s), n, len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("headTail of valid UTF-8 = invalid %q", got)
		}
	})
}

func TestDiagnostics(t *testing.T) {
	const path = "/workspace/.check-1-2.ts"
	tests := []struct{ name, in, want string }{
		{"snippet line", "TS2322 [ERROR]: Type 'string' is not assignable to type 'number'.\nconst n: number = \"a\";\n      ^\n    at file:///workspace/.check-1-2.ts:2:7\n\nerror: Type checking failed.\n",
			"TS2322 [ERROR]: Type 'string' is not assignable to type 'number'.\nconst n: number = \"a\";\n      ^\n    at line 2, column 7"},
		{"a module", "TS2365 [ERROR]: Operator '+' cannot be applied.\n    at file:///workspace/lib/q.ts:2:32\n\nFound 2 errors.\n\nerror: Type checking failed.\nStack backtrace:\n   0: <unknown>\n",
			"TS2365 [ERROR]: Operator '+' cannot be applied.\n    at /workspace/lib/q.ts:2:32"},
		{"nothing", "", ""},
	}
	for _, tt := range tests {
		if got := diagnostics(tt.in, path); got != tt.want {
			t.Errorf("%s: diagnostics(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

func FuzzDiagnostics(f *testing.F) {
	f.Add("    at file:///workspace/.check-1-2.ts:2:7\n", "/workspace/.check-1-2.ts")
	f.Add("file:///a:1:2 file:///b:3:4", "/a")
	f.Fuzz(func(t *testing.T, in, path string) {
		got := diagnostics(in, path)
		if strings.Count(got, "\n") > strings.Count(in, "\n") {
			t.Fatalf("diagnostics(%q, %q) = %q: more lines than it was given", in, path, got)
		}
		if path != "" && !strings.ContainsAny(path, ": \t\n\r") && strings.Contains(got, "file://"+path+":1:1") {
			t.Fatalf("diagnostics(%q, %q) = %q still names the checked file", in, path, got)
		}
	})
}
