package modal

import (
	"bytes"
	"context"
	"errors"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestEngine drives the engine view of the provider (what `sandboxctl --provider
// modal` uses) through the local server.
func TestEngine(t *testing.T) {
	host := modaltest.NewImageEngine(t, local.EngineOptions{})
	srv, env := imageServer(t, host)
	e := newProvider(t, env).Engine()
	e.o.TLS = srv.TLSConfig()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// The sandbox's own port (it has its own network): an HTTP server started in it
	// after Create.
	const port = 8000

	img := BaseImage{Def: image.Image{From: "debian:bookworm-slim"}}
	e.image = img
	info, err := e.Create(ctx, engine.Spec{Name: "eng-1", Env: []string{"A=1"}, Ports: []int{port}, Network: true,
		Labels: map[string]string{"owner": "test"}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if info.State != engine.StateRunning || info.Labels["owner"] != "test" || len(info.Tunnels) != 1 {
		t.Errorf("Create = %+v", info)
	}
	if _, err := e.Create(ctx, engine.Spec{Name: "eng-1"}); !errors.Is(err, engine.ErrNameTaken) {
		t.Errorf("Create with a taken name = %v, want ErrNameTaken", err)
	}
	modaltest.ServeHTTP(t, host.Engine, engineID(t, host.Engine, info.ID), port, "via DialPort")
	var out bytes.Buffer
	code, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "cat; echo $A $B"}, Env: []string{"B=2"},
		Stdin: strings.NewReader("in:"), Stdout: &out})
	if err != nil || code != 0 || out.String() != "in:1 2\n" {
		t.Errorf("Exec = %d, %v, %q", code, err, out.String())
	}
	var both bytes.Buffer // one writer for both streams, as callers that combine output give it
	if code, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "for i in $(seq 300); do echo out$i; echo err$i >&2; done"},
		Stdout: &both, Stderr: &both}); err != nil || code != 0 || strings.Count(both.String(), "\n") != 600 {
		t.Errorf("Exec with one writer for stdout and stderr = %d, %v, %d lines; want 600", code, err, strings.Count(both.String(), "\n"))
	}
	if code, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"sleep", "5"}, Timeout: time.Second}); !errors.Is(err, engine.ErrTimeout) || code != 124 {
		t.Errorf("Exec past its timeout = %d, %v, want 124, ErrTimeout", code, err)
	}
	var tty strings.Builder
	if code, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"tty"}, TTY: true, Stdout: &tty}); err != nil || code != 0 || !strings.HasPrefix(tty.String(), "/dev/pts/") {
		t.Errorf("Exec with TTY = %d, %v, %q; want a terminal", code, err, tty.String())
	}
	if c := e.Capabilities(); !c.DialPort || !c.Volumes || c.Images || c.Pause {
		t.Errorf("Capabilities = %+v; want DialPort and volumes, and no images or pause", c)
	}
	if err := e.WriteFile(ctx, info.ID, "/home/user/a/b.txt", []byte("bee"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := e.ReadFile(ctx, info.ID, "/home/user/a/b.txt"); err != nil || string(data) != "bee" {
		t.Errorf("ReadFile = %q, %v", data, err)
	}
	if err := e.WriteFile(ctx, info.ID, "/home/user/run.sh", []byte("#!/bin/sh\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	if fi, err := e.Stat(ctx, info.ID, "/home/user/run.sh"); err != nil || fs.FileMode(fi.Mode).Perm() != 0o750 {
		t.Errorf("Stat after WriteFile with mode 0750 = %+v, %v", fi, err)
	}
	if list, err := e.ListFiles(ctx, info.ID, "/home/user/a"); err != nil || len(list) != 1 || list[0].Name != "b.txt" || list[0].Size != 3 {
		t.Errorf("ListFiles = %+v, %v", list, err)
	}
	if _, err := e.Stat(ctx, info.ID, "/home/user/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %v, want fs.ErrNotExist", err)
	}
	if err := e.MkdirAll(ctx, info.ID, "/home/user/x/y"); err != nil {
		t.Errorf("MkdirAll: %v", err)
	}
	if fi, err := e.Stat(ctx, info.ID, "/home/user/x/y"); err != nil || !fi.IsDir {
		t.Errorf("Stat(dir) = %+v, %v", fi, err)
	}
	c, err := e.DialPort(ctx, info.ID, port)
	if err != nil {
		t.Fatalf("DialPort: %v", err)
	}
	io.WriteString(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	resp, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasSuffix(string(resp), "via DialPort") {
		t.Errorf("DialPort answered %q", resp)
	}
	snap, err := e.Snapshot(ctx, info.ID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	restored, err := e.Create(ctx, engine.Spec{Snapshot: snap})
	if err != nil {
		t.Fatalf("Create from snapshot: %v", err)
	}
	if data, err := e.ReadFile(ctx, restored.ID, "/home/user/a/b.txt"); err != nil || string(data) != "bee" {
		t.Errorf("restored ReadFile = %q, %v", data, err)
	}
	list, err := e.List(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("List = %+v, %v", list, err)
	}
	if err := e.Pause(ctx, info.ID); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("Pause = %v, want ErrUnsupported", err)
	}
	for _, id := range []string{info.ID, restored.ID, info.ID} {
		if err := e.Terminate(ctx, id); err != nil {
			t.Errorf("Terminate(%s): %v", id, err)
		}
	}
	if got, err := e.Get(ctx, info.ID); err != nil || got.State != engine.StateDead {
		t.Errorf("Get after Terminate = %+v, %v", got, err)
	}
}

// engineID is the id, in the local engine, of the sandbox the Modal server knows as
// modalID (the server labels every engine sandbox with its Modal ids).
func engineID(t *testing.T, eng *local.Engine, modalID string) string {
	t.Helper()
	infos, err := eng.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if slices.Contains(slices.Collect(maps.Values(in.Labels)), modalID) {
			return in.ID
		}
	}
	t.Fatalf("no engine sandbox is labelled with %s", modalID)
	return ""
}
