package coderun

import (
	"strings"
	"testing"
)

func TestModulePath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"lib/a.ts", "lib/a.ts", true},
		{"/workspace/lib/a.ts", "lib/a.ts", true},
		{"./lib//a.ts", "lib/a.ts", true},
		{"lib/../a.ts", "a.ts", true},
		{"", "", false},
		{".", "", false},
		{"..", "", false},
		{"../etc/passwd", "", false},
		{"lib/../../x", "", false},
		{"/etc/passwd", "", false},
		{"/workspace", "", false},
		{"/workspace/", "", false},
		{"/workspacex/a.ts", "", false},
		{"a\x00b", "", false},
	}
	for _, tt := range tests {
		got, err := modulePath(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("modulePath(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzModulePath(f *testing.F) {
	for _, s := range []string{"lib/a.ts", "/workspace/x", "../x", "a/../../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := modulePath(p)
		if err != nil {
			return
		}
		if got == "" || strings.HasPrefix(got, "/") || got == ".." || strings.HasPrefix(got, "../") || strings.Contains(got, "\x00") {
			t.Fatalf("modulePath(%q) = %q escapes /workspace", p, got)
		}
	})
}
