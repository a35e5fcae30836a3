package coderun

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// recordingEngine is the real engine (volumes too), with the specs it was asked to
// create kept.
type recordingEngine struct {
	*local.Engine
	mu    sync.Mutex
	specs []engine.Spec
}

func (e *recordingEngine) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	e.mu.Lock()
	e.specs = append(e.specs, spec)
	e.mu.Unlock()
	return e.Engine.Create(ctx, spec)
}

// connect serves r over an in-process pipe and returns an MCP client session; the
// returned func ends the connection and waits for ServeMCP.
func connect(t *testing.T, r *Runner) (*mcp.ClientSession, func()) {
	t.Helper()
	return connectWith(t, r, nil)
}

// connectWith is connect with client options.
func connectWith(t *testing.T, r *Runner, o *mcp.ClientOptions) (*mcp.ClientSession, func()) {
	t.Helper()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- r.ServeMCP(context.Background(), sr, sw, "test") }()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, o)
	cs, err := c.Connect(t.Context(), &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs, func() {
		cs.Close()
		cw.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeMCP: %v", err)
		}
	}
}

func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("%s: tool error %s", tool, b.String())
	}
	return b.String()
}

// Warm mode boots the connection's session at initialization; its spec limits egress
// to the allowed hosts and carries no secret; the session's sandbox ends with the
// connection.
func TestMCPWarmSession(t *testing.T) {
	eng := &recordingEngine{Engine: needRuntime(t)}
	c := testConfig(t, "mode = \"warm\"\n")
	var logs bytes.Buffer
	r, _ := newRunner(t, c, Options{Engine: eng, ReapEvery: -1, Logger: newTestLogger(&logs)})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	if _, err := r.EnsureSnapshot(t.Context()); err != nil {
		t.Fatal(err)
	}
	cs, end := connect(t, r)
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if strings.Join(names, " ") != "run_code save_code_modules search_docs" {
		t.Errorf("tools = %q", names)
	}
	// The warm boot runs without any call.
	var sandbox string
	for deadline := time.Now().Add(20 * time.Second); sandbox == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r.withState(func(m map[string]*sessionState) error {
			for id, st := range m {
				if strings.HasPrefix(id, "mcp-") && st.Pid > 0 {
					sandbox = st.Sandbox
				}
			}
			return nil
		})
	}
	if sandbox == "" {
		t.Fatal("warm mode booted no sandbox for the connection")
	}
	var res RunResult
	if err := json.Unmarshal([]byte(callText(t, cs, "run_code", map[string]any{"code": "const v = 6 * 7; v"})), &res); err != nil || string(res.Result) != "42" {
		t.Errorf("run_code = %+v, %v", res, err)
	}
	if out := callText(t, cs, "run_code", map[string]any{"code": "v + 1"}); !strings.Contains(out, `"result":43`) {
		t.Errorf("second run_code = %s", out)
	}
	end()
	if info, err := eng.Get(t.Context(), sandbox); err == nil && info.State == engine.StateRunning {
		t.Errorf("the connection's sandbox %s runs after the connection ended", sandbox)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	var session *engine.Spec
	for i := range eng.specs {
		if eng.specs[i].Labels["coderun-session"] != "" && eng.specs[i].Snapshot+eng.specs[i].Image != "" {
			session = &eng.specs[i]
		}
	}
	if session == nil {
		t.Fatalf("no session sandbox among %d creates", len(eng.specs))
	}
	if snap, _, _ := r.LookupSnapshot(t.Context()); (session.Image != "") != snap.Image || session.Image+session.Snapshot != snap.ID {
		t.Errorf("session spec image %q snapshot %q; want the dependency snapshot %+v", session.Image, session.Snapshot, snap)
	}
	if !session.Egress || session.Network || !slices.Equal(session.EgressHosts, []string{"api.example.test"}) {
		t.Errorf("session spec egress = %v network = %v hosts = %q, want egress to api.example.test only", session.Egress, session.Network, session.EgressHosts)
	}
	for _, kv := range session.Env {
		if strings.Contains(kv, testSecret) {
			t.Errorf("the secret is in the sandbox's environment: %q", kv)
		}
	}
	wantSecrets := []engine.Secret{{Name: "CODERUN_TEST_TOKEN", Value: testSecret, Hosts: []string{"api.example.test"}}}
	if diff := cmp.Diff(wantSecrets, session.Secrets); diff != "" {
		t.Errorf("session spec secrets (-want +got):\n%s", diff)
	}
	if !eng.Capabilities().Volumes {
		if len(session.Mounts) != 1 || len(session.Volumes) != 0 || session.Mounts[0].Target != "/workspace" {
			t.Errorf("session spec mounts %+v volumes %+v, want a host directory at /workspace", session.Mounts, session.Volumes)
		}
	} else if len(session.Mounts) != 0 || len(session.Volumes) != 1 || session.Volumes[0].Target != "/workspace" {
		t.Errorf("session spec mounts %+v volumes %+v, want the engine volume at /workspace", session.Mounts, session.Volumes)
	}
}
