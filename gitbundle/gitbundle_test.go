package gitbundle

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
)

var (
	a40 = strings.Repeat("a", 40)
	b40 = strings.Repeat("b", 40)
	a64 = strings.Repeat("a", 64)
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Header
		wantErr string
	}{
		{"v2", "# v2 git bundle\n-" + a40 + " base commit\n" + b40 + " refs/heads/main\n\nPACK",
			Header{Version: 2, Prerequisites: []Prerequisite{{a40, "base commit"}}, Refs: []Ref{{b40, "refs/heads/main"}},
				Len: 16 + 54 + 57 + 1}, ""},
		{"v3 sha256", "# v3 git bundle\n@object-format=sha256\n@filter\n" + a64 + " refs/tags/v1\n\n",
			Header{Version: 3, Capabilities: map[string]string{"object-format": "sha256", "filter": ""},
				Refs: []Ref{{a64, "refs/tags/v1"}}, Len: 16 + 22 + 8 + 78 + 1}, ""},
		{"HEAD ref", "# v2 git bundle\n" + a40 + " HEAD\n\n", Header{Version: 2, Refs: []Ref{{a40, "HEAD"}}, Len: 16 + 46 + 1}, ""},
		{"not a bundle", "PACK....", Header{}, "not a git bundle"},
		{"v4", "# v4 git bundle\n", Header{}, "not a git bundle"},
		{"empty", "", Header{}, "not a git bundle"},
		{"truncated", "# v2 git bundle\n" + a40 + " refs/heads/main\n", Header{}, "truncated"},
		{"no refs", "# v2 git bundle\n-" + a40 + "\n\n", Header{}, "no refs"},
		{"short oid", "# v2 git bundle\nabc refs/heads/main\n\n", Header{}, "bad ref line"},
		{"upper hex", "# v2 git bundle\n" + strings.ToUpper(a40) + " refs/heads/main\n\n", Header{}, "bad ref line"},
		{"sha256 oid in sha1 bundle", "# v2 git bundle\n" + a64 + " refs/heads/main\n\n", Header{}, "bad ref line"},
		{"capability in v2", "# v2 git bundle\n@object-format=sha1\n", Header{}, "capability"},
		{"unknown format", "# v3 git bundle\n@object-format=md5\n", Header{}, "unknown object format"},
		{"dotdot ref", "# v2 git bundle\n" + a40 + " refs/heads/../../x\n\n", Header{}, "bad ref line"},
		{"ref outside refs", "# v2 git bundle\n" + a40 + " config\n\n", Header{}, "bad ref line"},
		{"ref with space", "# v2 git bundle\n" + a40 + " refs/heads/a b\n\n", Header{}, "bad ref line"},
		{"control char", "# v2 git bundle\n" + a40 + " refs/heads/a\x01\n\n", Header{}, "control character"},
		{"bad prerequisite", "# v2 git bundle\n-zz\n", Header{}, "bad prerequisite"},
	}
	for _, tt := range tests {
		got, err := Parse(strings.NewReader(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, d)
		}
	}
}

func TestParseLimits(t *testing.T) {
	long := "# v2 git bundle\n" + a40 + " refs/heads/" + strings.Repeat("x", 70<<10) + "\n\n"
	if _, err := Parse(strings.NewReader(long)); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("70 KiB ref line: err = %v", err)
	}
	var many bytes.Buffer
	many.WriteString("# v2 git bundle\n")
	for i := 0; i <= MaxRefs; i++ {
		many.WriteString(a40 + " refs/heads/b" + strings.Repeat("x", i%7) + "\n")
	}
	if _, err := Parse(&many); err == nil {
		t.Error("more than MaxRefs refs accepted")
	}
}

func TestParseRealBundle(t *testing.T) {
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "-q", "-b", "main")
	gittest.Git(t, dir, "commit", "-q", "--allow-empty", "-m", "one")
	base := strings.TrimSpace(gittest.Git(t, dir, "rev-parse", "HEAD"))
	gittest.Git(t, dir, "commit", "-q", "--allow-empty", "-m", "two")
	head := strings.TrimSpace(gittest.Git(t, dir, "rev-parse", "HEAD"))
	gittest.Git(t, dir, "tag", "v1")
	f := filepath.Join(t.TempDir(), "b.bundle")
	gittest.Git(t, dir, "bundle", "create", "-q", f, "main", "v1", "^"+base)
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Prerequisites) != 1 || h.Prerequisites[0].OID != base {
		t.Errorf("prerequisites %+v, want %s", h.Prerequisites, base)
	}
	want := []Ref{{head, "refs/heads/main"}, {head, "refs/tags/v1"}}
	if d := cmp.Diff(want, h.Refs); d != "" {
		t.Errorf("refs (-want +got):\n%s", d)
	}
	if !bytes.HasPrefix(data[h.Len:], []byte("PACK")) {
		t.Errorf("data after header starts %q, want PACK", data[h.Len:h.Len+4])
	}
}

func TestValidRefName(t *testing.T) {
	for name, want := range map[string]bool{
		"HEAD": true, "refs/heads/main": true, "refs/heads/session/abc-1": true, "refs/tags/v1.0": true,
		"main": false, "refs/heads/": false, "refs//x": false, "refs/heads/.x": false, "refs/heads/x.lock": false,
		"refs/heads/a..b": false, "refs/heads/a@{1}": false, "refs/heads/a*": false, "refs/heads/a:b": false,
		"refs/heads/x.": false, "refs/heads/a\\b": false,
	} {
		if got := ValidRefName(name); got != want {
			t.Errorf("ValidRefName(%q) = %v, want %v", name, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("# v2 git bundle\n-" + a40 + " base\n" + b40 + " refs/heads/main\n\nPACK"))
	f.Add([]byte("# v3 git bundle\n@object-format=sha256\n" + a64 + " refs/tags/v1\n\n"))
	f.Add([]byte("# v2 git bundle\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := Parse(bytes.NewReader(in))
		if err != nil {
			return
		}
		if h.Len > len(in) || h.Version < 2 || len(h.Refs) == 0 {
			t.Fatalf("accepted header %+v of %d bytes", h, len(in))
		}
		for _, r := range h.Refs {
			if !ValidRefName(r.Name) {
				t.Fatalf("accepted ref %q", r.Name)
			}
		}
	})
}
