package e2bserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"net/url"
	"time"

	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
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

func TestHostTarget(t *testing.T) {
	tests := []struct {
		host     string
		wantPort int
		wantID   string
		wantOK   bool
	}{
		{"8080-iabc.localhost", 8080, "iabc", true},
		{"8080-iabc.localhost:1234", 8080, "iabc", true},
		{"49983-iabc.e2b.app", 49983, "iabc", true},
		{"127.0.0.1:1234", 0, "", false},
		{"localhost", 0, "", false},
		{"0-iabc.localhost", 0, "", false},
		{"65536-iabc.localhost", 0, "", false},
		{"080-iabc.localhost", 0, "", false},
		{"+80-iabc.localhost", 0, "", false},
		{"8080-.localhost", 0, "", false},
		{"x-iabc.localhost", 0, "", false},
		{"[::1]:80", 0, "", false},
	}
	for _, tt := range tests {
		port, id, ok := hostTarget(tt.host)
		if port != tt.wantPort || id != tt.wantID || ok != tt.wantOK {
			t.Errorf("hostTarget(%q) = %d, %q, %v, want %d, %q, %v", tt.host, port, id, ok, tt.wantPort, tt.wantID, tt.wantOK)
		}
	}
}

// FuzzHostTarget: any Host either fails or names a valid port and a non-empty id,
// and the port address made from them parses back.
func FuzzHostTarget(f *testing.F) {
	f.Add("8080-iabc.localhost:1")
	f.Add("1-a.b")
	f.Fuzz(func(t *testing.T, host string) {
		port, id, ok := hostTarget(host)
		if !ok {
			return
		}
		if port < 1 || port > 65535 || id == "" {
			t.Fatalf("hostTarget(%q) = %d, %q", host, port, id)
		}
		eid, p, err := parsePortAddr(portAddr(id, port))
		if err != nil || eid != id || p != port {
			t.Fatalf("parsePortAddr(portAddr(%q, %d)) = %q, %d, %v", id, port, eid, p, err)
		}
	})
}

func TestParseEntries(t *testing.T) {
	in := "f\x0012\x00644\x001700000000.5\x00root\x00root\x00/home/user/a b\x00" +
		"d\x004096\x00755\x001700000000.0000000000\x00user\x00user\x00/home/user/d/\x00" +
		"l\x007\x00777\x001700000000\x00root\x00root\x00/home/user/ln\x00"
	got, err := parseEntries([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Name, Type, Path, Perm string
		Size                   int64
	}
	var rows []row
	for _, e := range got {
		rows = append(rows, row{e.Name, e.Type, e.Path, e.Permissions, int64(e.Size)})
	}
	want := []row{
		{"a b", e2bwire.FileTypeFile, "/home/user/a b", "-rw-r--r--", 12},
		{"d", e2bwire.FileTypeDirectory, "/home/user/d", "drwxr-xr-x", 4096},
		{"ln", e2bwire.FileTypeSymlink, "/home/user/ln", "Lrwxrwxrwx", 7},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("parseEntries (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"f\x001\x00", "f\x00x\x00644\x001\x00u\x00g\x00/p\x00", "f\x001\x00999\x001\x00u\x00g\x00/p\x00"} {
		if _, err := parseEntries([]byte(bad)); err == nil {
			t.Errorf("parseEntries(%q) = nil error", bad)
		}
	}
}

// FuzzParseEntries: find's output, whatever a sandbox makes of it, never panics the
// parser, and what parses has clean absolute-or-relative paths and a name.
func FuzzParseEntries(f *testing.F) {
	f.Add([]byte("f\x0012\x00644\x001.5\x00u\x00g\x00/a\x00"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := parseEntries(b)
		if err != nil {
			return
		}
		for _, e := range es {
			if e.Path != path.Clean(e.Path) || e.Name != path.Base(e.Path) {
				t.Fatalf("entry %+v: path not clean or name not its base", e)
			}
		}
	})
}

func TestParseCursor(t *testing.T) {
	for _, tok := range []string{"", "abc", "12", "x.iabc", "12.", ".iabc"} {
		if _, _, err := parseCursor(tok); err == nil {
			t.Errorf("parseCursor(%q) = nil error", tok)
		}
	}
	at, id, err := parseCursor("1700000000000000001.iabc.d")
	if err != nil || at.UnixNano() != 1700000000000000001 || id != "iabc.d" {
		t.Errorf("parseCursor = %v, %q, %v", at, id, err)
	}
}

func TestRefuseV2(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // part of the error; empty: accepted
	}{
		{"none", `{}`, ""},
		{"public traffic", `{"network":{"allowPublicTraffic":true}}`, ""},
		{"autoResume off", `{"autoResume":{"enabled":false}}`, ""},
		{"null iam", `{"iam":null}`, ""},
		{"autoResume", `{"autoResume":{"enabled":true}}`, "autoResume"},
		{"volumes", `{"volumeMounts":[{"name":"v","path":"/d"}]}`, "volumeMounts"},
		{"iam", `{"iam":{"tokens":{}}}`, "iam"},
		{"mcp", `{"mcp":{}}`, "mcp"},
		{"allowOut", `{"network":{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}}`, ""},
		{"rules", `{"network":{"rules":{"api.example.com":[]}}}`, "egress rules"},
		{"egress proxy", `{"network":{"egressProxy":{}}}`, "egress rules"},
		{"private", `{"network":{"allowPublicTraffic":false}}`, ""},
		{"mask", `{"network":{"maskRequestHost":"x"}}`, "maskRequestHost"},
		{"https ports", `{"network":{"httpsPorts":[443]}}`, "httpsPorts"},
	}
	var mounts v2Fields
	if err := json.Unmarshal([]byte(`{"volumeMounts":[{"name":"v","path":"/d"}]}`), &mounts); err != nil {
		t.Fatal(err)
	}
	if err := refuseV2(mounts, true); err != nil {
		t.Errorf("refuseV2(volumeMounts) on an engine with volumes = %v, want nil", err)
	}
	for _, tt := range tests {
		var v v2Fields
		if err := json.Unmarshal([]byte(tt.in), &v); err != nil {
			t.Fatal(err)
		}
		err := refuseV2(v, false)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refuseV2(%s) = %v, want nil", tt.name, tt.in, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "local E2B server")):
			t.Errorf("%s: refuseV2(%s) = %v, want an error naming %s and the local server", tt.name, tt.in, err, tt.want)
		}
	}
}

func TestWatchEvents(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	old := map[string]watchState{
		"/w/keep":  {typ: e2bwire.FileTypeFile, size: 1, mtime: t0, mode: 0o644},
		"/w/grow":  {typ: e2bwire.FileTypeFile, size: 1, mtime: t0, mode: 0o644},
		"/w/chmod": {typ: e2bwire.FileTypeFile, size: 1, mtime: t0, mode: 0o644},
		"/w/gone":  {typ: e2bwire.FileTypeFile, size: 1, mtime: t0, mode: 0o644},
		"/w/d":     {typ: e2bwire.FileTypeDirectory, size: 4096, mtime: t0, mode: 0o755},
	}
	cur := map[string]watchState{
		"/w/keep":  old["/w/keep"],
		"/w/grow":  {typ: e2bwire.FileTypeFile, size: 2, mtime: t0.Add(time.Second), mode: 0o644},
		"/w/chmod": {typ: e2bwire.FileTypeFile, size: 1, mtime: t0, mode: 0o600},
		"/w/d":     {typ: e2bwire.FileTypeDirectory, size: 4096, mtime: t0.Add(time.Second), mode: 0o755},
		"/w/d/new": {typ: e2bwire.FileTypeFile},
	}
	want := []e2bwire.FilesystemEvent{
		{Name: "chmod", Type: e2bwire.EventChmod},
		{Name: "d/new", Type: e2bwire.EventCreate},
		{Name: "gone", Type: e2bwire.EventRemove},
		{Name: "grow", Type: e2bwire.EventWrite},
	}
	if diff := cmp.Diff(want, watchEvents("/w", old, cur)); diff != "" {
		t.Errorf("watchEvents (-want +got):\n%s", diff)
	}
}

func TestPartFileName(t *testing.T) {
	for _, tt := range []struct{ cd, want string }{
		{`form-data; name="file"; filename="/home/user/a/b.txt"`, "/home/user/a/b.txt"},
		{`form-data; name="file"; filename="d/e.txt"`, "d/e.txt"},
		{`form-data; name="file"`, ""},
		{`garbage;;`, ""},
	} {
		p := &multipart.Part{Header: textproto.MIMEHeader{"Content-Disposition": {tt.cd}}}
		if got := partFileName(p); got != tt.want {
			t.Errorf("partFileName(%q) = %q, want %q", tt.cd, got, tt.want)
		}
	}
}

// TestErrorMapping: the engine's sentinels (the caller's errors) are 4xx on both
// the control plane and envd; only an unknown error is a 500.
func TestErrorMapping(t *testing.T) {
	s := &Server{}
	tests := []struct {
		err      error
		status   int
		codeEnvd string
	}{
		{fmt.Errorf("x: %w", engine.ErrNotFound), 404, e2bwire.CodeNotFound},
		{fmt.Errorf("x: %w", engine.ErrNameTaken), 409, e2bwire.CodeInternal},
		{fmt.Errorf("x: %w", engine.ErrIsDir), 400, e2bwire.CodeInvalidArgument},
		{fmt.Errorf("x: %w", engine.ErrNotDir), 400, e2bwire.CodeInvalidArgument},
		{fmt.Errorf("x: %w", engine.ErrNotEmpty), 409, e2bwire.CodeFailedPrecondition},
		{fmt.Errorf("x: %w", engine.ErrInUse), 409, e2bwire.CodeFailedPrecondition},
		{fmt.Errorf("x: %w", engine.ErrLimit), 400, e2bwire.CodeInvalidArgument},
		{fmt.Errorf("x: %w", engine.ErrUnsupported), 501, e2bwire.CodeUnimplemented},
		{&fsError{e2bwire.CodePermissionDenied, "no"}, 403, e2bwire.CodePermissionDenied},
		{errors.New("boom"), 500, e2bwire.CodeInternal},
	}
	for _, tt := range tests {
		if st, _ := s.classify(tt.err); st != tt.status {
			t.Errorf("classify(%v) = %d, want %d", tt.err, st, tt.status)
		}
		if ce := asConnect(tt.err); ce.Code != tt.codeEnvd {
			t.Errorf("asConnect(%v) = %s, want %s", tt.err, ce.Code, tt.codeEnvd)
		}
	}
}

// FuzzParseNew: any create body, v1 or v2, is refused or becomes a sandbox with a
// template, valid environment names, a timeout in range and a token (v2 always).
func FuzzParseNew(f *testing.F) {
	f.Add([]byte(`{"templateID":"base","timeout":60,"envVars":{"A":"b"},"metadata":{"k":"v"}}`), true)
	f.Add([]byte(`{"templateID":"base","secure":false,"network":{"allowPublicTraffic":false}}`), false)
	f.Add([]byte(`{"templateID":"t","autoPause":true,"autoPauseMemory":false}`), true)
	s := &Server{o: Options{}}
	f.Fuzz(func(t *testing.T, body []byte, v2 bool) {
		var req newSandboxRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		sb, timeout, err := s.parseNew(req, v2)
		if err != nil {
			return
		}
		if sb.template == "" || timeout < 0 || timeout > 30*24*time.Hour || (v2 && sb.token == "") {
			t.Fatalf("parseNew(%s, v2=%v) = %+v, %v", body, v2, sb, timeout)
		}
		for k := range sb.envVars {
			if !validEnvName(k) {
				t.Fatalf("parseNew(%s) kept env name %q", body, k)
			}
		}
	})
}
