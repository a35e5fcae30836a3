package provider

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// The Target of a sandbox over the engine contract: what the plan runner drives.

// engineTarget is the Target of one sandbox over the engine.
type engineTarget struct {
	p          *Provider
	id         string
	paths      Paths
	sidecarURL string
	token      string
}

// Target is the Target of a running sandbox with token for its sidecar: what a boot
// runs its plan in, to run another plan the same way.
func (p *Provider) Target(ctx context.Context, sandboxID, token string) (Target, error) {
	info, err := p.running(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(OpExecCommand, err)
	}
	t := &engineTarget{p: p, id: sandboxID, paths: p.paths(info), token: token}
	if p.caps.Isolated {
		t.sidecarURL, err = p.portURL(ctx, info, PortSandboxMCP)
	} else {
		t.sidecarURL, _, err = p.Sidecar(ctx, sandboxID)
	}
	if err != nil {
		return nil, p.fail(OpExecCommand, err)
	}
	return t, nil
}

// Exec runs bash -c command in the sandbox's home; the timeout kills it.
func (t *engineTarget) Exec(ctx context.Context, command string, env map[string]string, timeout time.Duration) (ExecResult, error) {
	if timeout <= 0 {
		timeout = ExecTimeout
	}
	res, timedOut, err := t.p.run(ctx, t.id, engine.ExecRequest{Argv: []string{"bash", "-c", command}, Cwd: t.paths.Home,
		Env: envList(env), Timeout: timeout})
	if timedOut {
		return res, ErrExecTimeout
	}
	return res, err
}

// StartDetached starts command with bash through the engine's engine.Starter.
func (t *engineTarget) StartDetached(ctx context.Context, command string, env map[string]string) error {
	s, ok := t.p.eng.(engine.Starter)
	if !ok {
		return fmt.Errorf("start a detached command: %w", engine.ErrUnsupported)
	}
	_, err := s.StartDetached(ctx, t.id, engine.ExecRequest{Argv: []string{"bash", "-c", command}, Cwd: t.paths.Home, Env: envList(env)})
	return err
}

func (t *engineTarget) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return t.p.eng.WriteFile(ctx, t.id, p, data, uint32(mode.Perm()))
}

func (t *engineTarget) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return t.p.eng.ReadFile(ctx, t.id, p)
}

// MkdirAll makes the directory, then gives it mode when it has another.
func (t *engineTarget) MkdirAll(ctx context.Context, p string, mode fs.FileMode) error {
	if err := t.p.eng.MkdirAll(ctx, t.id, p); err != nil {
		return err
	}
	fi, err := t.p.eng.Stat(ctx, t.id, p)
	if err == nil && fs.FileMode(fi.Mode).Perm() == mode.Perm() {
		return nil
	}
	res, _, err := t.p.run(ctx, t.id, engine.ExecRequest{Argv: []string{"chmod", strconv.FormatUint(uint64(mode.Perm()), 8), "--", p},
		Timeout: MkdirTimeout})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("chmod %s: exit code %d: %s", p, res.ExitCode, CapOutput(res.Stderr, 512))
	}
	return err
}

func (t *engineTarget) Sidecar() (*sidecar.Client, error) {
	return sidecar.New(sidecar.Options{BaseURL: t.sidecarURL, Token: t.token, HTTPClient: t.p.hc, Retries: -1})
}

// ended says whether the sandbox has ended (terminated during its boot).
func (t *engineTarget) ended(ctx context.Context) error {
	info, err := t.p.eng.Get(ctx, t.id)
	if err != nil {
		return err
	}
	if info.State == engine.StateDead {
		return fmt.Errorf("sandbox %s ended", t.id)
	}
	return nil
}

// onStep logs a step's outcome and prints the ones a person waits for.
func (t *engineTarget) onStep(s Step, rep StepReport) {
	t.p.log.Info("boot step", "sandbox_id", t.id, "phase", rep.Phase, "step", s.Name, "status", rep.Status, "reason", rep.Reason)
	command := s.Kind == StepRun || s.Kind == StepStart || s.Kind == StepService || s.Kind == StepGitBundle
	if !command && rep.Status != StepFailed {
		return
	}
	line := fmt.Sprintf("  %s: %s", s.Name, rep.Status)
	if rep.Reason != "" {
		line += " (" + Tail(rep.Reason, 200) + ")"
	}
	t.p.progress("%s", line)
}
