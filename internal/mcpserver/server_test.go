package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// recorder is a Backend that remembers what it was asked and answers from fields.
type recorder struct {
	name    string
	calls   []string
	list    []apitype.ServiceInfo
	lines   []string
	failErr error
}

func (r *recorder) List(context.Context) ([]apitype.ServiceInfo, *int, error) {
	r.calls = append(r.calls, "list")
	return r.list, nil, r.failErr
}

func (r *recorder) Start(_ context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	r.calls = append(r.calls, "start "+req.Name)
	return apitype.ServiceInfo{Name: req.Name, PID: 42, LogFile: "/x.log"}, r.failErr
}

func (r *recorder) Stop(_ context.Context, name string) error {
	r.calls = append(r.calls, "stop "+name)
	return r.failErr
}

func (r *recorder) Expose(_ context.Context, port int) (string, error) {
	r.calls = append(r.calls, "expose")
	return "", r.failErr
}

func (r *recorder) LogTail(_ context.Context, name string, n int) ([]string, error) {
	r.calls = append(r.calls, "tail "+name)
	return r.lines, r.failErr
}

// session connects an MCP client to a server over b in memory.
func session(t *testing.T, b Backend, previewFile string) *mcp.ClientSession {
	t.Helper()
	srv, err := New(Options{Backend: b, PreviewURLFile: previewFile, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func TestToolValidationIsToolError(t *testing.T) {
	b := &recorder{}
	cs := session(t, b, "")
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"expose_port", map[string]any{"port": 0}, "between 1 and 65535"},
		{"expose_port", map[string]any{"port": 70000}, "between 1 and 65535"},
		{"wait_for_port", map[string]any{"port": -1}, "between 1 and 65535"},
		{"start_service", map[string]any{"name": "a", "command": "b", "readyPort": 1, "readyLogRegex": "x"}, "not both"},
		{"start_service", map[string]any{"name": "a", "command": strings.Repeat("c", 65537)}, "command is 65537 bytes long; the limit is 65536 bytes (64 KiB)"},
		{"start_service", map[string]any{"name": "a", "command": "b", "env": map[string]any{"K": strings.Repeat("v", 65536)}}, "env holds 65537 bytes of keys and values; the limit is 65536 bytes (64 KiB)"},
		{"start_service", map[string]any{"name": "a", "command": "b", "readyLogRegex": strings.Repeat("x", 4097)}, "readiness.log is 4097 bytes long; the limit is 4096 bytes (4 KiB)"},
	}
	for _, tt := range tests {
		text, isErr := call(t, cs, tt.tool, tt.args)
		if !isErr || !strings.Contains(text, tt.want) {
			t.Errorf("%s(%v) = %q (isError %v), want a tool error containing %q", tt.tool, tt.args, text, isErr, tt.want)
		}
	}
	if len(b.calls) != 0 {
		t.Errorf("backend was called %q for invalid input, want no call", b.calls)
	}
}

func TestBackendErrorIsToolErrorWithItsMessage(t *testing.T) {
	b := &recorder{failErr: errors.New(`Service "x" not found`)}
	cs := session(t, b, "")
	if text, isErr := call(t, cs, "stop_service", map[string]any{"name": "x"}); !isErr || text != `Service "x" not found` {
		t.Errorf("stop_service = %q (isError %v), want the backend's message as a tool error", text, isErr)
	}
}

func TestGetPreviewURL(t *testing.T) {
	file := filepath.Join(t.TempDir(), "url")
	cs := session(t, &recorder{}, file)
	if text, _ := call(t, cs, "get_preview_url", nil); !strings.Contains(text, "not available yet") {
		t.Errorf("get_preview_url with no file = %q, want 'not available yet'", text)
	}
	if err := os.WriteFile(file, []byte("https://preview.example/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if text, isErr := call(t, cs, "get_preview_url", nil); isErr || text != "https://preview.example/" {
		t.Errorf("get_preview_url = %q (isError %v), want the file's URL", text, isErr)
	}
}

func TestWaitForPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	open := ln.Addr().(*net.TCPAddr).Port
	closedPort := testutil.FreePort(t)

	b := &recorder{lines: []string{"listening failed: EADDRINUSE"}, list: []apitype.ServiceInfo{{Name: "web", Status: "error"}}}
	cs := session(t, b, "")
	if text, isErr := call(t, cs, "wait_for_port", map[string]any{"port": open}); isErr || !strings.Contains(text, "accepts connections") {
		t.Errorf("wait_for_port on a listening port = %q (isError %v)", text, isErr)
	}
	text, isErr := call(t, cs, "wait_for_port", map[string]any{"port": closedPort, "service": "web", "timeoutMs": 200})
	if !isErr || !strings.Contains(text, "EADDRINUSE") || !strings.Contains(text, `service "web" is error`) {
		t.Errorf("wait_for_port on a closed port = %q (isError %v), want a tool error with the service's status and log", text, isErr)
	}
}

func TestAutoPicksBackend(t *testing.T) {
	remote, direct := &recorder{name: "remote"}, &recorder{name: "direct"}
	var probeErr error
	built := 0
	a := &Auto{
		Probe:  func(context.Context) error { return probeErr },
		Remote: remote,
		Direct: func() (Backend, error) { built++; return direct, nil },
	}
	ctx := t.Context()
	_ = a.Stop(ctx, "one")
	probeErr = ErrNoServer
	_ = a.Stop(ctx, "two")
	_ = a.Stop(ctx, "three")
	probeErr = errors.New("token rejected")
	if err := a.Stop(ctx, "four"); err == nil || err.Error() != "token rejected" {
		t.Errorf("Stop with a refusing probe = %v, want the probe's error", err)
	}
	if got := strings.Join(remote.calls, ","); got != "stop one" {
		t.Errorf("remote calls = %q, want stop one", got)
	}
	if got := strings.Join(direct.calls, ","); got != "stop two,stop three" {
		t.Errorf("direct calls = %q, want stop two,stop three", got)
	}
	if built != 1 {
		t.Errorf("direct backend built %d times, want once", built)
	}
}
