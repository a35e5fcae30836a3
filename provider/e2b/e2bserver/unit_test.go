package e2bserver

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFileSignature(t *testing.T) {
	// Vectors computed with node's crypto the way the JS SDK's getSignature does.
	tests := []struct {
		path, op, user, token, exp, want string
	}{
		{"/home/user/a.txt", "read", "", "tok123", "", "v1_byj2OB/vujgbES/1KAKCaR27E+9eOrB6PzeTnIL8L6M"},
		{"a.txt", "write", "user", "tok123", "1700000000", "v1_F2r56ToAxixaWHDvSu2DdKgK8BsIKPDDZctBU6bTgNQ"},
	}
	for _, tt := range tests {
		if got := FileSignature(tt.path, tt.op, tt.user, tt.token, tt.exp); got != tt.want {
			t.Errorf("FileSignature(%q, %q, %q, _, %q) = %q, want %q", tt.path, tt.op, tt.user, tt.exp, got, tt.want)
		}
	}
}

func TestParseListQuery(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		v2      bool
		want    listFilter
		wantErr bool
	}{
		{"v1 default", "", false, listFilter{states: map[string]bool{"running": true}, limit: 100, asc: true}, false},
		{"v2 default", "", true, listFilter{states: map[string]bool{"running": true, "paused": true}, limit: 100}, false},
		{"v2 paused", "state=paused&limit=2&nextToken=abc", true, listFilter{states: map[string]bool{"paused": true}, limit: 2, after: "abc"}, false},
		{"metadata", "metadata=" + url.QueryEscape("user=abc&app=prod"), true,
			listFilter{states: map[string]bool{"running": true, "paused": true}, limit: 100, metadata: map[string]string{"user": "abc", "app": "prod"}}, false},
		{"bad state", "state=dead", true, listFilter{}, true},
		{"limit zero", "limit=0", true, listFilter{}, true},
		{"limit too big", "limit=101", true, listFilter{}, true},
		{"limit not a number", "limit=x", true, listFilter{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			got, err := parseListQuery(q, tt.v2)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseListQuery(%q) error = %v, wantErr %v", tt.query, err, tt.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(listFilter{}), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("parseListQuery(%q) (-want +got):\n%s", tt.query, diff)
				}
			}
		})
	}
}

func TestResolve(t *testing.T) {
	tests := map[string]string{
		"":                 "/home/user",
		"a.txt":            "/home/user/a.txt",
		"~/x/../y":         "/home/user/y",
		"/etc/hosts":       "/etc/hosts",
		"../../etc/passwd": "/etc/passwd",
		"/a//b/":           "/a/b",
	}
	for in, want := range tests {
		if got := resolve(in); got != want {
			t.Errorf("resolve(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzResolve: every envd path becomes a clean absolute path (the engine then keeps it
// inside the sandbox).
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"", "a", "~", "~/..", "/../..", "a/../../b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := resolve(in)
		if !path.IsAbs(got) || path.Clean(got) != got || strings.Contains(got, "/../") {
			t.Errorf("resolve(%q) = %q, want a clean absolute path", in, got)
		}
	})
}

// FuzzParseListQuery: untrusted list queries never panic and keep the limit in range.
func FuzzParseListQuery(f *testing.F) {
	f.Add("state=running,paused&limit=5&metadata=a%3Db")
	f.Add("metadata=%ZZ")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		got, err := parseListQuery(q, true)
		if err == nil && (got.limit < 1 || got.limit > 100 || len(got.states) == 0) {
			t.Errorf("parseListQuery(%q) = %+v: limit or states out of range", raw, got)
		}
	})
}
