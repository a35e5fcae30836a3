// Package local runs sandboxes on this machine. Engine (engine.go) is the engine:
// each sandbox lives in its own Linux namespaces with the production layout inside.
// Provider is the SandboxProvider on top of it: it builds the boot plan
// (provider.BuildPlan) and runs every step inside the sandbox through the engine:
// repos are cloned (local paths and file:// URLs are bound read-only into the
// sandbox at the same path), the plan's files are written and its commands run with
// bash under the plan's timeouts, and sandbox-mcp listens on its production port 4000,
// reached through a tunnel. Steps whose programs are missing (opencode, caddy, …) are
// skipped and reported, never faked.
//
// It exists so the host-side logic of package provider can be run end to end without
// a cloud account, by tests, examples, developers and sandboxctl.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
)

// Options configure a local Provider.
type Options struct {
	// Root holds the engine's data dir (sandboxes, snapshots) and the provider's state
	// files; required.
	Root string
	// SandboxMCP is the path of the sandbox-mcp binary; required. It is bound at
	// SandboxMCPPath inside isolated sandboxes.
	SandboxMCP string
	// Proliferate is the path of the proliferate CLI, bound at ProliferatePath inside
	// isolated sandboxes; empty skips it.
	Proliferate string
	// Unisolated runs sandboxes without namespaces (see EngineOptions.Unisolated): the
	// layout is then rooted in the sandbox's host directory, sandbox-mcp listens on a
	// free loopback port, and OpenCode and Caddy run only with RunOpenCode/RunCaddy.
	Unisolated bool
	// Getenv reads the host settings (SANDBOX_GIT_PULL_ON_RESTORE, LLM proxy, …); nil
	// means an empty environment.
	Getenv func(string) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// LookPath finds a step's program in unisolated mode; nil means exec.LookPath.
	LookPath func(string) (string, error)
	// RunOpenCode and RunCaddy start OpenCode and Caddy in unisolated sandboxes when
	// they are installed (their configs bind the fixed ports 4096 and 20000, which
	// several unisolated sandboxes cannot share). Isolated sandboxes always start them
	// when installed.
	RunOpenCode bool
	RunCaddy    bool
	// SidecarTimeout bounds the wait for sandbox-mcp's health; zero means 60s (a
	// loaded machine can take tens of seconds to start a process).
	SidecarTimeout time.Duration
	// KillGrace is unused since sandboxes run under the engine; kept for callers.
	KillGrace time.Duration
	// Logger receives step outcomes; nil discards.
	Logger *slog.Logger
	// Progress, when set, receives one line per boot step (sandboxctl's stderr).
	Progress io.Writer
	// GitMirrors makes the bundles of the plan's git-bundle steps (tokenless
	// sandboxes, docs/git-bundle.md); nil means a gitpush.Mirrors under
	// Root/git-mirrors.
	GitMirrors provider.GitBundler
	// Images resolves Spec.Image (EngineOptions.Images); nil: the engine boots no images.
	Images engine.ImageResolver
}

// Provider is the local SandboxProvider.
type Provider struct {
	o      Options
	log    *slog.Logger
	client *http.Client
	eng    *Engine
}

var (
	_ provider.SandboxProvider = (*Provider)(nil)
	_ provider.SandboxChecker  = (*Provider)(nil)
	_ provider.CommandExecer   = (*Provider)(nil)
	_ provider.FileReader      = (*Provider)(nil)
	_ provider.ServiceTester   = (*Provider)(nil)
)

// New checks o, opens the engine on o.Root and returns a Provider. Call Close when
// done with it; sandboxes keep running until Terminate.
func New(o Options) (*Provider, error) {
	if o.Root == "" {
		return nil, errors.New("new local provider: Root is required")
	}
	if o.SandboxMCP == "" {
		return nil, errors.New("new local provider: SandboxMCP is required")
	}
	abs, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, fmt.Errorf("new local provider: %w", err)
	}
	o.Root = abs
	if err := os.MkdirAll(filepath.Join(o.Root, "state"), 0o700); err != nil {
		return nil, fmt.Errorf("new local provider: %w", err)
	}
	if o.GitMirrors == nil {
		m, err := gitpush.New(gitpush.Options{CacheDir: filepath.Join(o.Root, "git-mirrors")})
		if err != nil {
			return nil, fmt.Errorf("new local provider: %w", err)
		}
		o.GitMirrors = m
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.SidecarTimeout <= 0 {
		o.SidecarTimeout = 60 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	mcp := o.SandboxMCP
	if !filepath.IsAbs(mcp) {
		if p, err := filepath.Abs(mcp); err == nil {
			mcp = p
		}
	}
	if _, err := os.Stat(mcp); err != nil {
		mcp = "" // Health says false; a boot fails at its sandbox-mcp step
	}
	eng, err := NewEngine(EngineOptions{DataDir: o.Root, Unisolated: o.Unisolated, SandboxMCP: mcp,
		Proliferate: o.Proliferate, Logger: log, Images: o.Images})
	if err != nil {
		return nil, fmt.Errorf("new local provider: %w", err)
	}
	return &Provider{o: o, log: log.With("component", "local-provider"),
		client: &http.Client{Timeout: 5 * time.Second}, eng: eng}, nil
}

// Engine is the engine the provider runs its sandboxes on.
func (p *Provider) Engine() *Engine { return p.eng }

// Close releases the engine; sandboxes keep running (Terminate ends them), and a new
// Provider on the same Root finds them again.
func (p *Provider) Close() error { return p.eng.Close() }

// Kind is provider.KindLocal.
func (p *Provider) Kind() provider.Kind { return provider.KindLocal }

// Capabilities: no pause (the engine's freeze is not a provider pause), no memory
// snapshots.
func (p *Provider) Capabilities() provider.Capabilities { return provider.Capabilities{} }

// Health reports whether sandboxes can be created: Root is writable and bash, git and
// the sandbox-mcp binary are present.
func (p *Provider) Health(ctx context.Context) bool {
	for _, prog := range []string{"bash", "git"} {
		if _, err := p.o.LookPath(prog); err != nil {
			return false
		}
	}
	if _, err := os.Stat(p.o.SandboxMCP); err != nil {
		return false
	}
	f, err := os.CreateTemp(filepath.Join(p.o.Root, "state"), ".health-*")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

// StepReport is the outcome of one boot step.
type StepReport struct {
	Name   string `json:"name"`
	Phase  string `json:"phase"`  // blocking | background
	Status string `json:"status"` // ok | skipped | failed
	// Reason says why a step was skipped or failed.
	Reason string `json:"reason,omitempty"`
	// Output is the command's capped, redacted output.
	Output     string `json:"output,omitempty"`
	DurationMs int64  `json:"durationMs"`
}

// Step statuses.
const (
	StatusOK      = "ok"
	StatusSkipped = "skipped"
	StatusFailed  = "failed"
)

// Boot is everything a local boot produced.
type Boot struct {
	provider.CreateResult
	// Home is the host directory of the sandbox's home (/home/user inside).
	Home string
	// Paths is the layout as the sandbox's processes see it.
	Paths provider.Paths
	// SidecarToken authenticates calls to SandboxMCPURL.
	SidecarToken string
	Plan         provider.Plan
	Report       []StepReport
}

// state is what Root/state/<id>.json keeps about a sandbox.
type state struct {
	SandboxID    string                `json:"sandboxId"`
	SessionID    string                `json:"sessionId"`
	Home         string                `json:"home"`
	Paths        provider.Paths        `json:"paths"`
	SidecarToken string                `json:"sidecarToken"`
	Result       provider.CreateResult `json:"result"`
	Report       []StepReport          `json:"report"`
}

func (p *Provider) statePath(id string) string {
	return filepath.Join(p.o.Root, "state", id+".json")
}

func validID(id string) bool {
	return id != "" && !strings.ContainsAny(id, `/\`) && id != "." && id != ".."
}

func (p *Provider) readState(id string) (state, error) {
	var st state
	if !validID(id) {
		return st, fs.ErrNotExist
	}
	b, err := os.ReadFile(p.statePath(id))
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

func (p *Provider) writeState(st state) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return writeFileAtomic(p.statePath(st.SandboxID), b, 0o600)
}

func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// alive reports whether the sandbox was booted by a local Provider and still runs.
func (p *Provider) alive(ctx context.Context, id string) (state, bool) {
	st, err := p.readState(id)
	if err != nil {
		return st, false
	}
	info, err := p.eng.Get(ctx, id)
	return st, err == nil && info.State != engine.StateDead
}

// CheckSandboxes returns the ids whose sandbox is alive, in input order. It only reads
// state and probes the sandboxes' init processes.
func (p *Provider) CheckSandboxes(ctx context.Context, ids []string) ([]string, error) {
	out := []string{}
	for _, id := range ids {
		if _, ok := p.alive(ctx, id); ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// Sidecar returns the sandbox-mcp URL and token of a sandbox (sandboxctl terminal).
func (p *Provider) Sidecar(ctx context.Context, id string) (string, string, error) {
	st, ok := p.alive(ctx, id)
	if !ok {
		return "", "", fmt.Errorf("sandbox %s: %w", id, engine.ErrNotFound)
	}
	return st.Result.SandboxMCPURL, st.SidecarToken, nil
}

// EnsureSandbox returns opts.CurrentSandboxID when it is alive, else boots a new one.
func (p *Provider) EnsureSandbox(ctx context.Context, opts provider.CreateOptions) (provider.EnsureResult, error) {
	if opts.CurrentSandboxID != "" {
		if st, ok := p.alive(ctx, opts.CurrentSandboxID); ok {
			return provider.EnsureResult{CreateResult: st.Result, Recovered: true}, nil
		}
	}
	r, err := p.CreateSandbox(ctx, opts)
	return provider.EnsureResult{CreateResult: r}, err
}

// CreateSandbox boots a sandbox and returns once every step, background ones
// included, has run, so the result is complete.
func (p *Provider) CreateSandbox(ctx context.Context, opts provider.CreateOptions) (provider.CreateResult, error) {
	b, err := p.Boot(ctx, opts)
	return b.CreateResult, err
}

// Pause is not supported.
func (p *Provider) Pause(ctx context.Context, sessionID, sandboxID string) (provider.SnapshotResult, error) {
	return provider.SnapshotResult{}, provider.PauseUnsupportedError(provider.KindLocal)
}

// snapshotMeta remembers where a snapshot's home was, to rewrite absolute paths of an
// unisolated sandbox.
type snapshotMeta struct {
	Home string `json:"home"`
}

// Snapshot stores the sandbox's writable state (its home, /tmp and /var/tmp) as an
// engine snapshot.
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (provider.SnapshotResult, error) {
	st, err := p.readState(sandboxID)
	if err != nil {
		return provider.SnapshotResult{}, provider.NewProviderError(provider.KindLocal, provider.OpSnapshot,
			fmt.Sprintf("sandbox %s not found", sandboxID), false, err)
	}
	id, err := p.eng.Snapshot(ctx, sandboxID)
	if err != nil {
		return provider.SnapshotResult{}, provider.FromError(err, provider.KindLocal, provider.OpSnapshot)
	}
	b, _ := json.Marshal(snapshotMeta{Home: st.Paths.Home})
	if err := writeFileAtomic(filepath.Join(p.o.Root, "snapshots", id, "provider.json"), b, 0o644); err != nil {
		return provider.SnapshotResult{}, provider.FromError(err, provider.KindLocal, provider.OpSnapshot)
	}
	return provider.SnapshotResult{SnapshotID: id}, nil
}

// Terminate ends the sandbox: every process of it, its mounts, tunnels and
// directories. An unknown or already terminated sandbox is success.
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	if sandboxID == "" {
		return provider.MissingSandboxIDError(provider.KindLocal)
	}
	if !validID(sandboxID) {
		return provider.NewProviderError(provider.KindLocal, provider.OpTerminate, "invalid sandboxId "+sandboxID, false, nil)
	}
	if err := p.eng.Terminate(ctx, sandboxID); err != nil {
		return provider.FromError(err, provider.KindLocal, provider.OpTerminate)
	}
	if err := os.Remove(p.statePath(sandboxID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return provider.FromError(err, provider.KindLocal, provider.OpTerminate)
	}
	return nil
}

// WriteEnvFile merges envVars into the sandbox's env override file.
func (p *Provider) WriteEnvFile(ctx context.Context, sandboxID string, envVars map[string]string) error {
	st, ok := p.alive(ctx, sandboxID)
	if !ok {
		return provider.NewProviderError(provider.KindLocal, provider.OpWriteEnvFile, fmt.Sprintf("sandbox %s not found", sandboxID), false, nil)
	}
	path := st.Paths.EnvOverrideFile()
	existing, err := p.eng.ReadFile(ctx, sandboxID, path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return provider.FromError(err, provider.KindLocal, provider.OpWriteEnvFile)
	}
	if err := p.eng.WriteFile(ctx, sandboxID, path, provider.MergeEnvFile(existing, envVars), 0o600); err != nil {
		return provider.FromError(err, provider.KindLocal, provider.OpWriteEnvFile)
	}
	return nil
}

// ExecCommand runs argv in the sandbox without a shell, with cwd (default: the
// workspace) and env, under the timeout (default 30s). Output is capped; a timeout is
// exit code 124, as with coreutils timeout.
func (p *Provider) ExecCommand(ctx context.Context, sandboxID string, argv []string, o provider.ExecOptions) (provider.ExecResult, error) {
	st, ok := p.alive(ctx, sandboxID)
	if !ok {
		return provider.ExecResult{}, provider.NewProviderError(provider.KindLocal, provider.OpExecCommand, fmt.Sprintf("sandbox %s not found", sandboxID), false, nil)
	}
	if len(argv) == 0 {
		return provider.ExecResult{}, provider.NewProviderError(provider.KindLocal, provider.OpExecCommand, "argv is empty", false, nil)
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = st.Paths.Workspace()
	}
	env := map[string]string{}
	for _, kv := range o.Env {
		env[kv.Key] = kv.Value
	}
	res, err := p.runCommand(ctx, sandboxID, st.Paths, argv, cwd, env, timeout)
	if err != nil {
		return res, provider.FromError(err, provider.KindLocal, provider.OpExecCommand)
	}
	res.Stdout = provider.CapOutput(res.Stdout, 0)
	res.Stderr = provider.CapOutput(res.Stderr, 0)
	return res, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
