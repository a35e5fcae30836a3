package e2bserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
)

// envdCall posts a unary envd call with the sandbox's token and returns the status
// and body.
func envdCall(t *testing.T, url string, sb e2bwire.Sandbox, path string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func run(t *testing.T, e *e2b.Envd, cmd string) string {
	t.Helper()
	r, err := e.Run(t.Context(), cmd, e2b.RunOptions{})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("run %q = %+v, %v", cmd, r, err)
	}
	return r.Stdout
}

// TestV2Routes: the current SDKs' create and connect routes, with their defaults and
// refusals.
func TestV2Routes(t *testing.T) {
	t.Parallel()
	srv, c := start(t)
	post := func(path, body string) (int, map[string]any) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", "e2b_0123456789abcdef0123456789abcdef01234567")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, sb := post("/v2/sandboxes", `{"templateID":"base","metadata":{"v":"2"},"envVars":{"A":"b"}}`)
	if code != http.StatusCreated || sb["envdAccessToken"] == "" || sb["sandboxID"] == nil {
		t.Fatalf("POST /v2/sandboxes = %d %v, want 201 with a token", code, sb)
	}
	id := sb["sandboxID"].(string)
	t.Cleanup(func() { _ = c.Kill(context.Background(), id) })
	d, err := c.Get(t.Context(), id)
	if err != nil || d.EndAt.Sub(d.StartedAt) < 290*time.Second || d.Metadata["v"] != "2" {
		t.Errorf("v2 sandbox = %+v, %v, want the 300 s default timeout and its metadata", d, err)
	}
	if code, m := post("/v2/sandboxes/"+id+"/connect", `{}`); code != http.StatusOK || m["sandboxID"] != id {
		t.Errorf("v2 connect of a running sandbox = %d %v, want 200", code, m)
	}
	if err := c.Pause(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if code, m := post("/v2/sandboxes/"+id+"/connect", `{"memory":false}`); code != http.StatusBadRequest {
		t.Errorf("v2 connect with memory false of a frozen sandbox = %d %v, want 400", code, m)
	}
	if code, m := post("/v2/sandboxes/"+id+"/connect", `{"timeout":60}`); code != http.StatusCreated {
		t.Errorf("v2 connect of a paused sandbox = %d %v, want 201", code, m)
	}
	for _, body := range []string{
		`{"templateID":"base","network":{"denyOut":["1.1.1.1"]}}`,
		`{"templateID":"base","network":{"rules":{"api.example.com":[]}}}`,
		`{"templateID":"base","autoResume":{"enabled":true}}`,
		`{"templateID":"base","mcp":{"x":{}}}`,
	} {
		for _, route := range []string{"/v2/sandboxes", "/sandboxes"} {
			if code, m := post(route, body); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(m["message"]), "not supported by the local E2B server") {
				t.Errorf("POST %s %s = %d %v, want 400 naming what is not supported", route, body, code, m)
			}
		}
	}
	if code, m := post("/v2/sandboxes/nope/connect", `{}`); code != http.StatusNotFound {
		t.Errorf("v2 connect of an unknown sandbox = %d %v, want 404", code, m)
	}
	if code, m := post("/sandboxes/"+id+"/network", `{}`); code != http.StatusNotImplemented || !strings.Contains(fmt.Sprint(m["message"]), "not served by the local E2B server") {
		t.Errorf("an unserved route = %d %v, want 501 saying so", code, m)
	}
}

// TestFileCalls: full paths in multi-file uploads, Move, refused removals, 4xx for
// the caller's errors, and file calls with the sandbox user's rights.
func TestFileCalls(t *testing.T) {
	t.Parallel()
	srv, c := start(t)
	sb := create(t, c, e2bwire.NewSandbox{})
	e := c.Envd(sb)

	// Two parts named by full paths, as files.write([{path, data}, …]) sends them.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, f := range []struct{ name, data string }{{"/home/user/a/one.txt", "1"}, {"b/two.txt", "2"}} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, f.name))
		pw, _ := mw.CreatePart(h)
		_, _ = pw.Write([]byte(f.data))
	}
	mw.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/files", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"/home/user/b/two.txt"`) {
		t.Errorf("multi-file upload = %d %s", resp.StatusCode, out)
	}
	if got := run(t, e, "cat /home/user/a/one.txt /home/user/b/two.txt"); got != "12" {
		t.Errorf("multi-file contents = %q, want the files at their full paths", got)
	}

	if code, out := envdCall(t, srv.URL, sb, e2bwire.PathFilesystemMove, e2bwire.MoveRequest{Source: "a/one.txt", Destination: "/home/user/c/moved.txt"}); code != 200 || !strings.Contains(out, `"path":"/home/user/c/moved.txt"`) {
		t.Errorf("Move = %d %s", code, out)
	}
	if got := run(t, e, "cat /home/user/c/moved.txt; test -e /home/user/a/one.txt || echo gone"); got != "1gone\n" {
		t.Errorf("after Move = %q", got)
	}

	for _, p := range []string{"", " ", "/", "/home/.."} {
		if code, out := envdCall(t, srv.URL, sb, e2bwire.PathFilesystemRemove, e2bwire.PathRequest{Path: p}); code != http.StatusBadRequest {
			t.Errorf("Remove %q = %d %s, want 400", p, code, out)
		}
	}
	if got := run(t, e, "ls /home/user | wc -l"); strings.TrimSpace(got) == "0" {
		t.Error("a refused Remove emptied /home/user")
	}

	// The caller's errors are 4xx.
	for _, tc := range []struct {
		path string
		body any
		want int
	}{
		{e2bwire.PathFilesystemStat, e2bwire.PathRequest{Path: "/nope"}, 404},
		{e2bwire.PathFilesystemListDir, e2bwire.ListDirRequest{Path: "/home/user/c/moved.txt"}, 400},
		{e2bwire.PathFilesystemMakeDir, e2bwire.PathRequest{Path: "/usr/x"}, 403},
		{e2bwire.PathFilesystemRemove, e2bwire.PathRequest{Path: "/usr/bin"}, 403},
		{e2bwire.PathFilesystemMove, e2bwire.MoveRequest{Source: "/nope", Destination: "/x"}, 404},
		{e2bwire.PathFilesystemMakeDir, e2bwire.PathRequest{Path: "/home/user/c"}, 409},
	} {
		if code, out := envdCall(t, srv.URL, sb, tc.path, tc.body); code != tc.want {
			t.Errorf("%s %+v = %d %s, want %d", tc.path, tc.body, code, out, tc.want)
		}
	}
	for _, p := range []string{"/home/user", "/dev/zero"} {
		if err := e.Download(t.Context(), p, io.Discard); err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("download of %s = %v, want a 400", p, err)
		}
	}

	// What a command in the sandbox cannot read, the file API cannot either: a file
	// only root may read, seen by a command of an unprivileged user, and the file
	// API's answer for the same path are the same.
	asCmd := run(t, e, "cat /proc/1/environ >/dev/null 2>&1 && echo readable || echo refused")
	_, apiErr := e.ReadFile(t.Context(), "/proc/1/environ")
	t.Logf("/proc/1/environ: command %q, file API error %v", asCmd, apiErr)
	if (asCmd == "refused\n") != (apiErr != nil) {
		t.Errorf("/proc/1/environ: a command says %q, the file API says %v: they must agree", asCmd, apiErr)
	}
}

// TestPortHosts: a <port>-<id>.<domain> Host reaches that port inside the sandbox,
// for plain HTTP and for a WebSocket.
func TestPortHosts(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the servers inside the sandbox are python's")
	}
	srv, c := start(t)
	sb := create(t, c, e2bwire.NewSandbox{})
	e := c.Envd(sb)
	if err := e.WriteFile(t.Context(), "/home/user/www/index.html", []byte("inside")); err != nil {
		t.Fatal(err)
	}
	if err := e.WriteFile(t.Context(), "/home/user/ws.py", []byte(wsEcho)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"cd /home/user/www && exec python3 -m http.server 8080 --bind 127.0.0.1", "exec python3 /home/user/ws.py"} {
		if _, err := e.Start(t.Context(), e2b.StartOptions{Cmd: "/bin/bash", Args: []string{"-c", cmd}}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, e, "for i in $(seq 100); do (echo >/dev/tcp/127.0.0.1/8080 && echo >/dev/tcp/127.0.0.1/8081) 2>/dev/null && exit 0; sleep 0.1; done; exit 1")

	get := func(host string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/index.html", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(e2b.Host(sb.SandboxID, 8080, "localhost") + ":1234"); code != 200 || body != "inside" {
		t.Errorf("GET through 8080-<id>.localhost = %d %q, want the page", code, body)
	}
	if code, body := get(e2b.Host(sb.SandboxID, 8090, "localhost")); code != http.StatusBadGateway || !strings.Contains(body, "nothing answers on port 8090") {
		t.Errorf("GET to a closed port = %d %q, want 502 saying so", code, body)
	}
	if code, _ := get(e2b.Host("inope", 8080, "localhost")); code != http.StatusBadGateway {
		t.Errorf("GET to an unknown sandbox = %d, want 502", code)
	}

	// A sandbox created with allowPublicTraffic false wants its traffic token.
	b, _ := json.Marshal(map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v2/sandboxes", bytes.NewReader(b))
	req.Header.Set("X-API-Key", e2btest.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var priv e2bwire.Sandbox
	_ = json.NewDecoder(resp.Body).Decode(&priv)
	resp.Body.Close()
	t.Cleanup(func() { _ = c.Kill(context.Background(), priv.SandboxID) })
	if priv.TrafficAccessToken == "" {
		t.Fatalf("create with allowPublicTraffic false = %+v, want a traffic access token", priv)
	}
	// A loopback port forward cannot ask for the token: refused, naming the way.
	var ae *e2bwire.APIError
	if u, err := c.PortURL(t.Context(), priv.SandboxID, 8080); !errors.As(err, &ae) || ae.Status != http.StatusForbidden ||
		!strings.Contains(ae.Message, "allowPublicTraffic false") {
		t.Errorf("PortURL of a private sandbox = %q, %v; want a 403 naming allowPublicTraffic", u, err)
	}
	pe := c.Envd(priv)
	if _, err := pe.Start(t.Context(), e2b.StartOptions{Cmd: "/bin/bash", Args: []string{"-c", "cd /tmp && echo private > index.html && exec python3 -m http.server 8080 --bind 127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	run(t, pe, "for i in $(seq 100); do (echo >/dev/tcp/127.0.0.1/8080) 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusForbidden}, {"wrong", http.StatusForbidden}, {priv.TrafficAccessToken, http.StatusOK}} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/index.html", nil)
		req.Host = e2b.Host(priv.SandboxID, 8080, "localhost")
		if tc.token != "" {
			req.Header.Set("E2b-Traffic-Access-Token", tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET a private sandbox's port with token %q = %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}

	ws, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(srv.URL, "http")+"/",
		&websocket.DialOptions{Host: e2b.Host(sb.SandboxID, 8081, "localhost")})
	if err != nil {
		t.Fatalf("websocket through 8081-<id>.localhost: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(t.Context(), websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(t.Context()); err != nil || string(msg) != "ping" {
		t.Errorf("websocket echo = %q, %v, want ping", msg, err)
	}
}

// wsEcho is a one-message WebSocket echo server on 127.0.0.1:8081 (short text
// frames only), in Python's standard library.
const wsEcho = `import base64, hashlib, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8081))
s.listen()
while True:
    c, _ = s.accept()
    d = b""
    while b"\r\n\r\n" not in d:
        b = c.recv(4096)
        if not b:
            break
        d += b
    if b"\r\n\r\n" not in d:
        c.close()
        continue
    key = [l.split(b":", 1)[1].strip() for l in d.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    h = c.recv(2)
    n = h[1] & 127
    mask = c.recv(4)
    p = bytearray(c.recv(n))
    for i in range(n):
        p[i] ^= mask[i % 4]
    c.sendall(bytes([0x81, n]) + bytes(p))
    c.recv(64)
    c.close()
`

// TestUploadPastLimit: an upload past MaxUpload is a 413 and leaves the file it
// would have replaced as it was.
func TestUploadPastLimit(t *testing.T) {
	srv, c := startWith(t, e2btest.Options{MaxUpload: 1 << 20})
	sb := create(t, c, e2bwire.NewSandbox{})
	e := c.Envd(sb)
	if err := e.WriteFile(t.Context(), "/home/user/f", []byte("old")); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/files?path=/home/user/f",
		io.LimitReader(&pattern{}, 1<<20+1))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("upload past the limit = %s, want 413", resp.Status)
	}
	if got := run(t, e, "cat /home/user/f; ls -a /home/user | grep -c e2b-upload || true"); got != "old0\n" {
		t.Errorf("after a refused upload: %q, want the old file and no temporary file", got)
	}
}

// TestPTY: a process started with a pty runs on a real terminal of the asked size,
// and its output comes as pty data (the SDK test covers input, resize and kill).
func TestPTY(t *testing.T) {
	t.Parallel()
	srv, c := start(t)
	sb := create(t, c, e2bwire.NewSandbox{})
	req := e2bwire.StartRequest{Process: e2bwire.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "tty; stty size"}},
		PTY: &e2bwire.PTY{Size: e2bwire.PTYSize{Cols: 100, Rows: 30}}}
	b, _ := json.Marshal(req)
	var body bytes.Buffer
	if err := e2bwire.WriteEnvelope(&body, 0, b); err != nil {
		t.Fatal(err)
	}
	hr, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+e2bwire.PathProcessStart, &body)
	hr.Header.Set("Content-Type", e2bwire.ContentTypeConnectJSON)
	hr.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	hr.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	var end *e2bwire.EndEvent
	for {
		env, err := e2bwire.ReadEnvelope(resp.Body)
		if err != nil {
			t.Fatalf("read stream: %v (so far %q)", err, out.String())
		}
		if env.Flags&e2bwire.FlagEndStream != 0 {
			if err := e2bwire.ParseEndStream(env.Data); err != nil {
				t.Fatal(err)
			}
			break
		}
		var sr e2bwire.StreamResponse
		if err := json.Unmarshal(env.Data, &sr); err != nil {
			t.Fatal(err)
		}
		if d := sr.Event.Data; d != nil {
			if len(d.Stdout) > 0 || len(d.Stderr) > 0 {
				t.Errorf("a pty process sent stdout/stderr data %+v, want pty data", d)
			}
			out.Write(d.PTY)
		}
		if sr.Event.End != nil {
			end = sr.Event.End
		}
	}
	if end == nil || end.ExitCode != 0 || !strings.Contains(out.String(), "/dev/pts/") || !strings.Contains(out.String(), "30 100") {
		t.Errorf("pty output %q, end %+v, want a /dev/pts terminal of 30 rows and 100 columns", out.String(), end)
	}
}
