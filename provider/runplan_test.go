package provider

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

func TestTail(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcdef", 3, "def"},
		{"aé", 1, ""},   // é is two bytes: its second byte does not start a character
		{"aéb", 2, "b"}, // the cut would start inside é
		{"aéb", 3, "éb"},
	}
	for _, tt := range tests {
		if got := Tail(tt.s, tt.n); got != tt.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

// hostTarget is a Target on this machine: commands run with bash in dir, files are
// the host's. StartDetached waits for its command (the tests start only short ones),
// so nothing outlives a test. The sidecar is whatever listens at sidecarURL.
type hostTarget struct {
	dir        string
	sidecarURL string
}

func (h hostTarget) Exec(ctx context.Context, command string, env map[string]string, timeout time.Duration) (ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = h.dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: cmd.ProcessState.ExitCode()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, ErrExecTimeout
	case errors.As(err, &ee):
		return res, nil
	}
	return res, err
}

func (h hostTarget) StartDetached(ctx context.Context, command string, env map[string]string) error {
	_, err := h.Exec(ctx, command, env, time.Minute)
	return err
}

func (h hostTarget) WriteFile(_ context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

func (h hostTarget) ReadFile(_ context.Context, p string) ([]byte, error) { return os.ReadFile(p) }

func (h hostTarget) MkdirAll(_ context.Context, p string, mode fs.FileMode) error {
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

func (h hostTarget) Sidecar() (*sidecar.Client, error) {
	return sidecar.New(sidecar.Options{BaseURL: h.sidecarURL, Retries: -1})
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	return url
}

// TestRunPlanSidecarNeverUp: a sidecar that never answers fails its step with the
// tail of its log, the service after it is skipped, and RunPlan says why.
func TestRunPlanSidecarNeverUp(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "sandbox-mcp.log")
	if err := os.WriteFile(logPath, []byte("listen: address already in use\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := Plan{Background: []Step{
		{Name: StepNameSandboxMCP, Kind: StepStart, Command: "true"},
		{Name: "service", Kind: StepService, Service: &ServiceStart{Name: "s", Command: "true"}},
	}}
	rep, err := RunPlan(t.Context(), plan, hostTarget{dir: dir, sidecarURL: closedURL(t)},
		RunOptions{SidecarTimeout: 300 * time.Millisecond, SidecarLog: logPath})
	if err == nil || !strings.Contains(err.Error(), "sandbox-mcp was not started") || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("RunPlan error = %v, want the sidecar not started, with its log", err)
	}
	if len(rep) != 2 || rep[0].Status != StepFailed || rep[1].Status != StepSkipped || rep[1].Reason != "sandbox-mcp is not running" {
		t.Errorf("reports = %+v, want the sidecar failed and the service skipped", rep)
	}
}

// TestRunPlanEndedStopsThePhase: once Ended says the sandbox is gone, the wait and
// the phase end; no later step runs.
func TestRunPlanEndedStopsThePhase(t *testing.T) {
	dir := t.TempDir()
	plan := Plan{Background: []Step{
		{Name: StepNameSandboxMCP, Kind: StepStart, Command: "true"},
		{Name: "after", Kind: StepRun, Command: "touch after"},
	}}
	gone := errors.New("terminated")
	rep, err := RunPlan(t.Context(), plan, hostTarget{dir: dir, sidecarURL: closedURL(t)},
		RunOptions{SidecarTimeout: time.Minute, Ended: func(context.Context) error { return gone }})
	if !errors.Is(err, gone) || !errors.Is(err, errSandboxEnded) {
		t.Errorf("RunPlan error = %v, want the sandbox ended", err)
	}
	if len(rep) != 1 || rep[0].Status != StepFailed {
		t.Errorf("reports = %+v, want only the failed sidecar step", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, "after")); err == nil {
		t.Error("the step after the ended wait ran")
	}
}

// TestRunPlanUnknownPhaseAndKind: what the runner cannot run is an error, not a skip.
func TestRunPlanUnknownPhaseAndKind(t *testing.T) {
	r := NewRunner(Plan{Blocking: []Step{{Name: "odd", Kind: "teleport", Fatal: true}}}, hostTarget{dir: t.TempDir()}, RunOptions{})
	if err := r.RunPhase(t.Context(), "sideways"); err == nil {
		t.Error(`RunPhase("sideways") = nil, want an error`)
	}
	err := r.RunPhase(t.Context(), PhaseBlocking)
	if err == nil || !strings.Contains(err.Error(), `unknown step kind "teleport"`) {
		t.Errorf("RunPhase of an unknown kind = %v", err)
	}
}
