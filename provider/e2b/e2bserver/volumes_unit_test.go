package e2bserver

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestParseMounts(t *testing.T) {
	tests := []struct {
		name string
		in   []e2bwire.VolumeMount
		want []engine.VolumeMount
		err  string // part of the error; empty: accepted
	}{
		{"none", nil, []engine.VolumeMount{}, ""},
		{"two", []e2bwire.VolumeMount{{Name: "a", Path: "/data/"}, {Name: "a", Path: "/x/../y"}},
			[]engine.VolumeMount{{Name: "a", Target: "/data"}, {Name: "a", Target: "/y"}}, ""},
		{"relative", []e2bwire.VolumeMount{{Name: "a", Path: "data"}}, nil, "absolute"},
		{"empty path", []e2bwire.VolumeMount{{Name: "a", Path: ""}}, nil, "absolute"},
		{"root", []e2bwire.VolumeMount{{Name: "a", Path: "/.."}}, nil, "absolute"},
		{"nul", []e2bwire.VolumeMount{{Name: "a", Path: "/a\x00b"}}, nil, "absolute"},
		{"same path", []e2bwire.VolumeMount{{Name: "a", Path: "/d"}, {Name: "b", Path: "/d/."}}, nil, "two volumes"},
		{"bad name", []e2bwire.VolumeMount{{Name: "../a", Path: "/d"}}, nil, `"../a" not found`},
		{"empty name", []e2bwire.VolumeMount{{Name: "", Path: "/d"}}, nil, `"" not found`},
	}
	for _, tt := range tests {
		got, err := parseMounts(tt.in)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: parseMounts = %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: parseMounts = %v, %v, want an error with %q", tt.name, got, err, tt.err)
		case tt.err == "":
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s: parseMounts (-want +got):\n%s", tt.name, d)
			}
		}
	}
}

func FuzzParseMounts(f *testing.F) {
	f.Add([]byte(`[{"name":"a","path":"/data"},{"name":"b","path":"/x/../y/"}]`))
	f.Add([]byte(`[{"name":"..","path":"/"}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var ms []e2bwire.VolumeMount
		if json.Unmarshal(body, &ms) != nil {
			return
		}
		got, err := parseMounts(ms)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, m := range got {
			if !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target || m.Target == "/" || seen[m.Target] ||
				strings.ContainsRune(m.Target, 0) || rules.ValidateVolumeName(m.Name) != nil {
				t.Fatalf("parseMounts(%s) kept %+v", body, m)
			}
			seen[m.Target] = true
		}
	})
}
