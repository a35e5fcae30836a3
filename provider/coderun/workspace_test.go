package coderun

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFileList(t *testing.T) {
	tests := []struct {
		name, in string
		want     map[string]string
	}{
		{"empty", "", map[string]string{}},
		{"two files", "1700000000.5 120 lib/a.ts\n1700000001.0 9 b c.ts\n", map[string]string{"lib/a.ts": "1700000000.5 120", "b c.ts": "1700000001.0 9"}},
		{"malformed lines", "x\n1 2\n 3 a.ts\n1 2 \n", map[string]string{}},
		{"escapes the workspace", "1 2 ../etc/passwd\n1 2 /etc/passwd\n", map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, parseFileList(tt.in)); diff != "" {
				t.Errorf("parseFileList(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// FuzzParseFileList: any listing parses, and every path stays under /workspace.
func FuzzParseFileList(f *testing.F) {
	f.Add("1700000000.5 120 lib/a.ts\n")
	f.Add("1 2 ../x\n\n1 2 a\x00b\n")
	f.Fuzz(func(t *testing.T, in string) {
		for p := range parseFileList(in) {
			if _, err := modulePath(p); err != nil {
				t.Fatalf("path %q escapes the workspace: %v", p, err)
			}
		}
	})
}
