package e2bserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
)

// call sends a control-plane request with the API key and returns the status and body.
func call(t *testing.T, srv *e2btest.Server, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", e2btest.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestVolumes: the volume routes over HTTP, a volume mounted in two sandboxes at once,
// in-use refusal, and data that outlives both sandboxes.
func TestVolumes(t *testing.T) {
	t.Parallel()
	srv, c := start(t)
	if !srv.Engine.Capabilities().Volumes {
		t.Skip("the local engine has no volumes here (loop devices or mkfs.ext4 missing)")
	}
	ctx := t.Context()
	// Registered before any sandbox, so it runs after their cleanup: a volume left
	// mounted makes the data dir's cleanup fail.
	t.Cleanup(func() {
		for _, id := range []string{"shared", "other"} {
			call(t, srv, "DELETE", "/volumes/"+id, nil)
		}
	})

	code, b := call(t, srv, "POST", "/volumes", e2bwire.NewVolume{Name: "shared"})
	var vt e2bwire.VolumeAndToken
	if err := json.Unmarshal(b, &vt); code != http.StatusCreated || err != nil || vt.VolumeID != "shared" || vt.Name != "shared" || vt.Token == "" {
		t.Fatalf("POST /volumes = %d %s, want 201 with id, name and token", code, b)
	}
	if code, b := call(t, srv, "POST", "/volumes", e2bwire.NewVolume{Name: "shared"}); code != http.StatusConflict {
		t.Errorf("POST /volumes again = %d %s, want 409", code, b)
	}
	for _, bad := range []string{"", "../x", "-x", strings.Repeat("a", 300)} {
		if code, b := call(t, srv, "POST", "/volumes", e2bwire.NewVolume{Name: bad}); code != http.StatusBadRequest {
			t.Errorf("POST /volumes %q = %d %s, want 400", bad, code, b)
		}
	}
	if code, _ := call(t, srv, "POST", "/volumes", e2bwire.NewVolume{Name: "other"}); code != http.StatusCreated {
		t.Fatalf("POST /volumes other = %d", code)
	}
	code, b = call(t, srv, "GET", "/volumes", nil)
	var list []e2bwire.Volume
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil || len(list) != 2 ||
		list[0] != (e2bwire.Volume{VolumeID: "other", Name: "other"}) || list[1] != (e2bwire.Volume{VolumeID: "shared", Name: "shared"}) {
		t.Errorf("GET /volumes = %d %s, want other and shared", code, b)
	}
	code, b = call(t, srv, "GET", "/volumes/shared", nil)
	var got e2bwire.VolumeAndToken
	if err := json.Unmarshal(b, &got); code != http.StatusOK || err != nil || got != vt {
		t.Errorf("GET /volumes/shared = %d %s, want %+v", code, b, vt)
	}
	for _, id := range []string{"nope", "%2e%2e", "-x"} {
		if code, b := call(t, srv, "GET", "/volumes/"+id, nil); code != http.StatusNotFound {
			t.Errorf("GET /volumes/%s = %d %s, want 404", id, code, b)
		}
	}
	if code, b := call(t, srv, "DELETE", "/volumes/other", nil); code != http.StatusNoContent {
		t.Errorf("DELETE /volumes/other = %d %s, want 204", code, b)
	}
	if code, b := call(t, srv, "DELETE", "/volumes/other", nil); code != http.StatusNotFound {
		t.Errorf("DELETE /volumes/other again = %d %s, want 404", code, b)
	}

	// Mounted in two sandboxes at once (v1 and v2 bodies): written in one, read in the other.
	a := create(t, c, e2bwire.NewSandbox{VolumeMounts: []e2bwire.VolumeMount{{Name: "shared", Path: "/data"}}})
	code, b = call(t, srv, "POST", "/v2/sandboxes", map[string]any{"templateID": "base",
		"volumeMounts": []e2bwire.VolumeMount{{Name: "shared", Path: "/mnt/shared/"}}})
	var bsb e2bwire.Sandbox
	if err := json.Unmarshal(b, &bsb); code != http.StatusCreated || err != nil {
		t.Fatalf("POST /v2/sandboxes with volumeMounts = %d %s", code, b)
	}
	t.Cleanup(func() { _ = c.Kill(context.Background(), bsb.SandboxID) })
	if d, err := c.Get(ctx, bsb.SandboxID); err != nil || len(d.VolumeMounts) != 1 || d.VolumeMounts[0] != (e2bwire.VolumeMount{Name: "shared", Path: "/mnt/shared"}) {
		t.Errorf("GET /sandboxes/B = %+v, %v, want its volume mount", d, err)
	}
	if r, err := c.Envd(a).Run(ctx, "echo from-a > /data/note", e2b.RunOptions{}); err != nil || r.ExitCode != 0 {
		t.Fatalf("write in A = %+v, %v", r, err)
	}
	if got, err := c.Envd(bsb).ReadFile(ctx, "/mnt/shared/note"); err != nil || string(got) != "from-a\n" {
		t.Errorf("read in B = %q, %v, want from-a", got, err)
	}
	code, b = call(t, srv, "DELETE", "/volumes/shared", nil)
	if code != http.StatusConflict || !strings.Contains(string(b), "in use") {
		t.Errorf("DELETE /volumes/shared while mounted = %d %s, want 409 saying in use", code, b)
	}

	// Refusals on create: unknown volume, relative path, the same path twice.
	for _, m := range [][]e2bwire.VolumeMount{
		{{Name: "missing", Path: "/x"}},
		{{Name: "shared", Path: "rel"}},
		{{Name: "shared", Path: "/"}},
		{{Name: "shared", Path: "/x"}, {Name: "shared", Path: "/x/"}},
	} {
		code, b := call(t, srv, "POST", "/sandboxes", e2bwire.NewSandbox{TemplateID: "base", VolumeMounts: m})
		if code != http.StatusBadRequest {
			t.Errorf("create with %+v = %d %s, want 400", m, code, b)
		}
		if m[0].Name == "missing" && !strings.Contains(string(b), "missing") {
			t.Errorf("create with an unknown volume = %s, want its name", b)
		}
	}

	// The data outlives both sandboxes.
	for _, id := range []string{a.SandboxID, bsb.SandboxID} {
		if err := c.Kill(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	d := create(t, c, e2bwire.NewSandbox{VolumeMounts: []e2bwire.VolumeMount{{Name: "shared", Path: "/srv/v"}}})
	if got, err := c.Envd(d).ReadFile(ctx, "/srv/v/note"); err != nil || string(got) != "from-a\n" {
		t.Errorf("read after both sandboxes ended = %q, %v, want from-a", got, err)
	}
	if err := c.Kill(ctx, d.SandboxID); err != nil {
		t.Fatal(err)
	}
	if code, b := call(t, srv, "DELETE", "/volumes/shared", nil); code != http.StatusNoContent {
		t.Errorf("DELETE /volumes/shared after its sandboxes = %d %s, want 204", code, b)
	}
	if code, b := call(t, srv, "GET", "/volumes", nil); code != http.StatusOK || strings.TrimSpace(string(b)) != "[]" {
		t.Errorf("GET /volumes at the end = %d %s, want []", code, b)
	}
}

// TestVolumesRefused: on an engine without volumes the routes and volumeMounts are
// refused naming the local server; the volume content API is refused everywhere.
func TestVolumesRefused(t *testing.T) {
	t.Parallel()
	srv, _ := startWith(t, e2btest.Options{NoVolumes: true})
	for _, r := range []struct{ method, path string }{{"POST", "/volumes"}, {"GET", "/volumes"}, {"GET", "/volumes/v"}, {"DELETE", "/volumes/v"}} {
		code, b := call(t, srv, r.method, r.path, e2bwire.NewVolume{Name: "v"})
		if code != http.StatusNotImplemented || !strings.Contains(string(b), "local E2B server") {
			t.Errorf("%s %s = %d %s, want 501 naming the local E2B server", r.method, r.path, code, b)
		}
	}
	code, b := call(t, srv, "POST", "/v2/sandboxes", map[string]any{"templateID": "base",
		"volumeMounts": []e2bwire.VolumeMount{{Name: "v", Path: "/data"}}})
	if code != http.StatusBadRequest || !strings.Contains(string(b), "volumeMounts") || !strings.Contains(string(b), "local E2B server") {
		t.Errorf("create with volumeMounts = %d %s, want 400 naming volumeMounts and the local server", code, b)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/volumecontent/v/file?path=/a", nil)
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(body), "volume content API") {
		t.Errorf("GET /volumecontent/... = %d %s, want 501 naming the volume content API", resp.StatusCode, body)
	}
}
