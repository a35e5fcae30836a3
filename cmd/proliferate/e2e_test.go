package main

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
)

// realSidecar starts a real `sandbox-mcp api` and returns the CLI's environment for it.
func realSidecar(t *testing.T) (*sidecartest.Sidecar, map[string]string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sandbox-mcp; skipped with -short")
	}
	sc := sidecartest.Start(t, sidecartest.Build(t))
	env := map[string]string{}
	for _, kv := range sc.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return sc, env
}

func TestServicesScenarioRealSidecar(t *testing.T) {
	_, env := realSidecar(t)
	servicesScenario(t, env)
}

// TestWaitRealSidecar: --wait returns once the readiness probe passes, and
// fails with exit 1 and the service's last log lines when it exits instead.
func TestWaitRealSidecar(t *testing.T) {
	_, env := realSidecar(t)
	ctx := t.Context()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	cmd := fmt.Sprintf("sleep 1; exec python3 -m http.server %d --bind 127.0.0.1", port)
	r := cli(t, ctx, env, nil, "services", "start", "--name", "web", "--command", cmd, "--ready-tcp", fmt.Sprint(port), "--wait")
	if r.code != 0 {
		t.Fatalf("start --wait = %d, stderr %q", r.code, r.stderr)
	}
	if m := decodeLine(t, r.stdout); m["service"].(map[string]any)["ready"] != true {
		t.Errorf("start --wait printed %v, want ready true", m)
	}
	if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Errorf("after --wait, port %d refuses connections: %v", port, err)
	} else {
		conn.Close()
	}
	if r := cli(t, ctx, env, nil, "services", "wait", "--name", "web"); r.code != 0 {
		t.Errorf("services wait on a ready service = %d, stderr %q", r.code, r.stderr)
	}

	r = cli(t, ctx, env, nil, "services", "start", "--name", "bad", "--command", "echo boom-before-exit; exit 3", "--ready-tcp", fmt.Sprint(port+1), "--wait")
	if r.code != 1 {
		t.Fatalf("start --wait of a failing service = %d, want 1; stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "boom-before-exit") {
		t.Errorf("stderr = %q, want the service's last log lines", r.stderr)
	}
}
