package sandboxmcp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// mcpProc is a `sandbox-mcp mcp` process spoken to in raw JSON-RPC lines, so
// the test also proves that nothing else reaches its stdout.
type mcpProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	nextID int
}

func startMCP(t *testing.T, bin string, env []string) *mcpProc {
	t.Helper()
	cmd := exec.Command(bin, "mcp")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &mcpProc{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	p.out.Buffer(make([]byte, 1<<20), 16<<20)
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	var init struct {
		ServerInfo struct{ Name, Version string } `json:"serverInfo"`
	}
	p.call("initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "test", "version": "1"},
	}, &init)
	if init.ServerInfo.Name != "sandbox_mcp" {
		t.Fatalf("initialize: serverInfo.name = %q, want sandbox_mcp", init.ServerInfo.Name)
	}
	// serverInfo.version is the binary's own --version.
	if v, err := exec.Command(bin, "--version").Output(); err != nil || "sandbox-mcp "+init.ServerInfo.Version+"\n" != string(v) {
		t.Fatalf("initialize: serverInfo.version = %q, want what %q printed (%v)", init.ServerInfo.Version, v, err)
	}
	p.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return p
}

func (p *mcpProc) send(v any) {
	p.t.Helper()
	b, _ := json.Marshal(v)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("write to mcp stdin: %v", err)
	}
}

// call sends a request and returns its result; every stdout line must be JSON-RPC.
func (p *mcpProc) call(method string, params any, result any) {
	p.t.Helper()
	p.nextID++
	id := p.nextID
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	for p.out.Scan() {
		var msg struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      *int            `json:"id"`
			Result  json.RawMessage `json:"result"`
			Error   *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(p.out.Bytes(), &msg); err != nil || msg.JSONRPC != "2.0" {
			p.t.Fatalf("stdout line is not JSON-RPC: %q", p.out.Text())
		}
		if msg.ID == nil || *msg.ID != id {
			continue // a notification or a server request
		}
		if msg.Error != nil {
			p.t.Fatalf("%s: protocol error %d %s", method, msg.Error.Code, msg.Error.Message)
		}
		if err := json.Unmarshal(msg.Result, result); err != nil {
			p.t.Fatalf("%s: decode result %s: %v", method, msg.Result, err)
		}
		return
	}
	p.t.Fatalf("%s: mcp stdout closed: %v", method, p.out.Err())
}

// tool calls a tool and returns its text and whether it is a tool error.
func (p *mcpProc) tool(name string, args map[string]any) (string, bool) {
	p.t.Helper()
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	p.call("tools/call", map[string]any{"name": name, "arguments": args}, &res)
	var b strings.Builder
	for _, c := range res.Content {
		b.WriteString(c.Text)
	}
	return b.String(), res.IsError
}

func (p *mcpProc) mustTool(name string, args map[string]any) string {
	p.t.Helper()
	text, isErr := p.tool(name, args)
	if isErr {
		p.t.Fatalf("%s(%v) is a tool error: %s", name, args, text)
	}
	return text
}

// TestMCPToolsThroughAPI is the agent's sequence against a running API server:
// start → list → wait_for_port → service_logs → stop, plus the cross-checks
// that MCP and the API see and stop each other's services.
func TestMCPToolsThroughAPI(t *testing.T) {
	bin := sidecartest.Build(t)
	sc := sidecartest.Start(t, bin)
	p := startMCP(t, bin, sc.Env)

	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	p.call("tools/list", map[string]any{}, &list)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema["type"] != "object" {
			t.Errorf("tool %s: description %q, schema %v; want both", tl.Name, tl.Description, tl.InputSchema)
		}
	}
	for _, want := range []string{"start_service", "stop_service", "expose_port", "list_services", "get_preview_url", "wait_for_port", "service_logs"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list = %q, missing %s", names, want)
		}
	}

	port := testutil.FreePort(t)
	p.mustTool("start_service", map[string]any{"name": "web", "command": fmt.Sprintf("echo hello-from-web; exec python3 -m http.server %d --bind 127.0.0.1", port)})
	if text := p.mustTool("list_services", nil); !strings.Contains(text, `"name": "web"`) || !strings.Contains(text, `"status": "running"`) {
		t.Errorf("list_services = %s, want web running", text)
	}
	p.mustTool("wait_for_port", map[string]any{"port": port, "service": "web", "timeoutMs": 20000})
	if text := p.mustTool("service_logs", map[string]any{"name": "web"}); !strings.Contains(text, "hello-from-web") {
		t.Errorf("service_logs = %q, want the service's output", text)
	}

	// Started through MCP → visible and stoppable through the API.
	var svcs apitype.ServicesResponse
	if code, err := sc.Do("GET", "/api/services", nil, &svcs); err != nil || code != 200 {
		t.Fatalf("GET /api/services = %d, %v", code, err)
	}
	if i := slices.IndexFunc(svcs.Services, func(s apitype.ServiceInfo) bool { return s.Name == "web" }); i < 0 || svcs.Services[i].Status != "running" {
		t.Fatalf("API lists %+v, want web running", svcs.Services)
	}
	if code, err := sc.Do("DELETE", "/api/services/web", nil, nil); err != nil || code != 200 {
		t.Fatalf("DELETE /api/services/web = %d, %v", code, err)
	}
	if text := p.mustTool("list_services", nil); !strings.Contains(text, `"status": "stopped"`) {
		t.Errorf("after the API's stop, list_services = %s, want web stopped", text)
	}

	// Started through the API → visible and stoppable through MCP.
	if code, err := sc.Do("POST", "/api/services", map[string]string{"name": "worker", "command": "sleep 600"}, nil); err != nil || code != 200 {
		t.Fatalf("POST /api/services = %d, %v", code, err)
	}
	if text := p.mustTool("list_services", nil); !strings.Contains(text, `"name": "worker"`) {
		t.Errorf("list_services = %s, want worker", text)
	}
	p.mustTool("stop_service", map[string]any{"name": "worker"})
	var one apitype.ServiceResponse
	if code, err := sc.Do("GET", "/api/services/worker", nil, &one); err != nil || code != 200 || one.Service.Status != "stopped" {
		t.Errorf("after stop_service, GET /api/services/worker = %d %+v %v, want stopped", code, one.Service, err)
	}

	// Failures are tool errors with the API's messages, not protocol errors.
	if text, isErr := p.tool("start_service", map[string]any{"name": "../x", "command": "true"}); !isErr || !strings.Contains(text, "name") {
		t.Errorf("start_service with a bad name = %q (isError %v), want a tool error about the name", text, isErr)
	}
	if text, isErr := p.tool("stop_service", map[string]any{"name": "never"}); !isErr || !strings.Contains(text, `Service "never" not found`) {
		t.Errorf("stop_service of an unknown name = %q (isError %v), want a not-found tool error", text, isErr)
	}
	if text, isErr := p.tool("wait_for_port", map[string]any{"port": testutil.FreePort(t), "service": "web", "timeoutMs": 300}); !isErr || !strings.Contains(text, "hello-from-web") {
		t.Errorf("wait_for_port on a closed port = %q (isError %v), want a tool error with web's last log lines", text, isErr)
	}
	if text := p.mustTool("get_preview_url", nil); !strings.Contains(text, "not available") && !strings.HasPrefix(text, "http") {
		t.Errorf("get_preview_url = %q", text)
	}
}

// TestMCPDirectThenAPIAdopts: with no API server, the tools act on the state
// dir; an API server started later adopts the service and can stop it.
func TestMCPDirectThenAPIAdopts(t *testing.T) {
	bin := sidecartest.Build(t)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	env := []string{
		"SANDBOX_MCP_AUTH_TOKEN=" + sidecartest.Token,
		"SANDBOX_MCP_STATE_DIR=" + stateDir,
		"WORKSPACE_DIR=" + dir,
		fmt.Sprintf("PROLIFERATE_SANDBOX_MCP_URL=http://127.0.0.1:%d", testutil.FreePort(t)),
	}
	p := startMCP(t, bin, env)
	p.mustTool("start_service", map[string]any{"name": "direct", "command": "echo direct-out; sleep 600"})
	if text := p.mustTool("expose_port", map[string]any{"port": 3000}); !strings.Contains(text, "3000") {
		t.Errorf("expose_port = %q", text)
	}
	if text := p.mustTool("list_services", nil); !strings.Contains(text, `"name": "direct"`) || !strings.Contains(text, `"exposedPort": 3000`) {
		t.Errorf("list_services = %s, want direct and exposedPort 3000", text)
	}

	sc := sidecartest.Start(t, bin, "SANDBOX_MCP_STATE_DIR="+stateDir)
	var svcs apitype.ServicesResponse
	if code, err := sc.Do("GET", "/api/services", nil, &svcs); err != nil || code != 200 {
		t.Fatalf("GET /api/services = %d, %v", code, err)
	}
	i := slices.IndexFunc(svcs.Services, func(s apitype.ServiceInfo) bool { return s.Name == "direct" })
	if i < 0 || svcs.Services[i].Status != "running" {
		t.Fatalf("API lists %+v, want direct running", svcs.Services)
	}
	if svcs.ExposedPort == nil || *svcs.ExposedPort != 3000 {
		t.Errorf("API exposedPort = %v, want 3000", svcs.ExposedPort)
	}
	pid := svcs.Services[i].PID
	if code, err := sc.Do("DELETE", "/api/services/direct", nil, nil); err != nil || code != 200 {
		t.Fatalf("DELETE /api/services/direct = %d, %v", code, err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d of the direct service still alive after the API's stop", pid)
	}
}
