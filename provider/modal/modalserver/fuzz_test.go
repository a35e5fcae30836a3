package modalserver

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"
)

// FuzzTokenCheck: the command router's bearer token is untrusted input; only tokens
// this server signed pass, and nothing panics.
func FuzzTokenCheck(f *testing.F) {
	tk := newTokens(time.Hour, func() time.Time { return time.Unix(1_700_000_000, 0) })
	good := tk.sign("ta-x")
	f.Add(good)
	f.Add("a.b.c")
	f.Add("")
	f.Add(strings.Repeat(".", 5))
	f.Fuzz(func(t *testing.T, s string) {
		sub, err := tk.check(s)
		if err == nil && s != good {
			// Another valid token needs the key: only a re-encoding of the signed one
			// can pass, and it must name the same subject.
			if sub != "ta-x" {
				t.Fatalf("check(%q) accepted subject %q", s, sub)
			}
		}
	})
}

// FuzzSandboxID: the V1/V2 routing rule never panics, and every id the server makes is
// routed the way it was made.
func FuzzSandboxID(f *testing.F) {
	f.Add("sb-nGEijt9WbBMlGrsPH9FOaC")
	f.Add("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		_ = isV1SandboxID(s)
		if !isV1SandboxID(newID("sb")) || isV1SandboxID(newV2SandboxID(time.Unix(int64(len(s)), 0))) {
			t.Fatal("generated ids are routed to the wrong version")
		}
	})
}

func TestTokens(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tk := newTokens(time.Minute, func() time.Time { return now })
	tok := tk.sign("ta-1")
	if sub, err := tk.check(tok); err != nil || sub != "ta-1" {
		t.Fatalf("check(own token) = %q, %v", sub, err)
	}
	other := newTokens(time.Minute, func() time.Time { return now })
	if _, err := other.check(tok); err == nil {
		t.Errorf("a token signed with another key passed")
	}
	now = now.Add(2 * time.Minute)
	if _, err := tk.check(tok); err == nil {
		t.Errorf("an expired token passed")
	}
}

func TestIDShapes(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{newID("sb"), true},
		{"sb-nGEijt9WbBMlGrsPH9FOaC", true},
		{"sb-01ARZ3NDEKTSV4RRFFQ69G5FAV", false},
		{newV2SandboxID(time.Now()), false},
		{"sb-123", false},
		{"ta-nGEijt9WbBMlGrsPH9FOaC", false},
	} {
		if got := isV1SandboxID(tc.id); got != tc.want {
			t.Errorf("isV1SandboxID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
	if id := newV2SandboxID(time.UnixMilli(0)); id != "sb-00000000000000000000000000"[:3+10]+id[13:] {
		t.Errorf("V2 id %q does not start with a zero timestamp", id)
	}
	a, b := stableID("ap", "x"), stableID("ap", "x")
	if a != b || a == stableID("ap", "y") {
		t.Errorf("stableID is not a function of its key")
	}
}

func TestParseFSCommand(t *testing.T) {
	for _, tc := range []struct {
		arg, op, path string
		recursive     bool
		wantErr       string
	}{
		{`{"ReadFile":{"path":"/a/../b"}}`, "ReadFile", "/b", false, ""},
		{`{"Remove":{"path":"/x/","recursive":true}}`, "Remove", "/x", true, ""},
		{`{"MakeDirectory":{"path":"/d","parents":false}}`, "MakeDirectory", "/d", false, ""},
		{`{"ReadFile":{"path":"rel"}}`, "", "", false, "InvalidArgument"},
		{`{"ReadFile":{"path":"/a"},"Stat":{"path":"/b"}}`, "", "", false, "InvalidArgument"},
		{`{"Watch":{"path":"/a"}}`, "", "", false, "NotSupported"},
		{`not json`, "", "", false, "InvalidArgument"},
	} {
		op, a, err := parseFSCommand(tc.arg)
		if tc.wantErr != "" {
			var fe *fsError
			if !errors.As(err, &fe) || fe.Kind != tc.wantErr {
				t.Errorf("parseFSCommand(%s) = %v, want %s", tc.arg, err, tc.wantErr)
			}
			continue
		}
		if err != nil || op != tc.op || a.Path != tc.path || a.Recursive != tc.recursive {
			t.Errorf("parseFSCommand(%s) = %q, %+v, %v", tc.arg, op, a, err)
		}
	}
}

// FuzzParseFSCommand: the filesystem tool's argument comes from the client; a parse
// either fails with a tool error or yields one command on a clean absolute path.
func FuzzParseFSCommand(f *testing.F) {
	f.Add(`{"ReadFile":{"path":"/a"}}`)
	f.Add(`{"WriteFile":{"path":"/../../etc/x"}}`)
	f.Add(`{"Remove":{"path":"/","recursive":true}}`)
	f.Fuzz(func(t *testing.T, arg string) {
		op, a, err := parseFSCommand(arg)
		if err != nil {
			var fe *fsError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a tool error", err)
			}
			return
		}
		if op == "" || !strings.HasPrefix(a.Path, "/") || path.Clean(a.Path) != a.Path {
			t.Fatalf("parseFSCommand(%q) = %q, %q", arg, op, a.Path)
		}
	})
}
