package e2b_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// TestEngineOverE2B drives the engine.Engine adapter against the local server.
func TestEngineOverE2B(t *testing.T) {
	t.Parallel()
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP})
	c := srv.Client(t)
	bare, err := e2b.NewEngine(c, e2b.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Create(t.Context(), engine.Spec{}); err == nil || !strings.Contains(err.Error(), "E2B_TEMPLATE") {
		t.Errorf("Create without a template = %v, want E2B_TEMPLATE named", err)
	}
	eng, err := e2b.NewEngine(c, e2b.EngineOptions{Template: "base", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	in, err := eng.Create(ctx, engine.Spec{Env: []string{"X=1"}, Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Terminate(context.Background(), in.ID) })
	if in.State != engine.StateRunning || in.Labels["k"] != "v" {
		t.Errorf("create = %+v", in)
	}
	if _, err := eng.Create(ctx, engine.Spec{Name: "n"}); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("create with a name = %v, want ErrUnsupported", err)
	}

	var out bytes.Buffer
	code, err := eng.Exec(ctx, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", `read l; echo "$X $l"`}, Stdin: strings.NewReader("in\n"), Stdout: &out})
	if err != nil || code != 0 || out.String() != "1 in\n" {
		t.Errorf("exec = %d, %q, %v, want 0 and 1 in", code, out.String(), err)
	}
	code, err = eng.Exec(ctx, in.ID, engine.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if code != 124 || !errors.Is(err, engine.ErrTimeout) {
		t.Errorf("exec past its timeout = %d, %v, want 124 and ErrTimeout", code, err)
	}
	if err := eng.WriteFile(ctx, in.ID, "/home/user/a/b.sh", []byte("echo hi"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := eng.Stat(ctx, in.ID, "/home/user/a/b.sh")
	if err != nil || fi.Size != 7 || fs.FileMode(fi.Mode).Perm() != 0o755 {
		t.Errorf("stat = %+v, %v, want 7 bytes with mode 0755", fi, err)
	}
	if list, err := eng.ListFiles(ctx, in.ID, "/home/user/a"); err != nil || len(list) != 1 || list[0].Name != "b.sh" {
		t.Errorf("list = %+v, %v", list, err)
	}
	if err := eng.Remove(ctx, in.ID, "/home/user/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.ReadFile(ctx, in.ID, "/home/user/a/b.sh"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read after remove = %v, want ErrNotExist", err)
	}
	if err := eng.MkdirAll(ctx, in.ID, "/home/user/x/y"); err != nil {
		t.Fatal(err)
	}

	if err := eng.Pause(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := eng.Get(ctx, in.ID); got.State != engine.StatePaused {
		t.Errorf("state after pause = %q", got.State)
	}
	if err := eng.Resume(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	snap, err := eng.Snapshot(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	child, err := eng.Create(ctx, engine.Spec{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := eng.Stat(ctx, child.ID, "/home/user/x/y"); err != nil || !fi.IsDir {
		t.Errorf("dir in the sandbox from the snapshot = %+v, %v", fi, err)
	}
	list, err := eng.List(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("list = %+v, %v, want 2 sandboxes", list, err)
	}
	if _, err := eng.DialPort(ctx, in.ID, 1); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("DialPort to a port nothing listens on = %v, want the refusal", err)
	}
	for _, id := range []string{in.ID, child.ID, in.ID} {
		if err := eng.Terminate(ctx, id); err != nil {
			t.Errorf("terminate %s = %v", id, err)
		}
	}
	if _, err := eng.Get(ctx, in.ID); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("get after terminate = %v, want ErrNotFound", err)
	}
}
