// Package local is a SandboxProvider that boots sandboxes on this machine: a sandbox
// is a directory used as HOME, repos are cloned from local paths or file:// URLs, the
// boot plan's files are written and its commands run with bash under the plan's
// timeouts, and sandbox-mcp is started on a free loopback port. Steps whose programs
// are missing (opencode, caddy, docker, …) are skipped and reported, never faked.
//
// It exists so the host-side logic of package provider can be run end to end without
// a cloud account, by tests, examples and developers.
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
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// Options configure a local Provider.
type Options struct {
	// Root holds the sandboxes, snapshots and state files; required.
	Root string
	// SandboxMCP is the path of the sandbox-mcp binary; required.
	SandboxMCP string
	// Getenv reads the host settings (SANDBOX_GIT_PULL_ON_RESTORE, LLM proxy, …); nil
	// means an empty environment.
	Getenv func(string) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// LookPath finds a step's program; nil means exec.LookPath.
	LookPath func(string) (string, error)
	// Command is where every process of a sandbox starts; nil means exec.Command.
	// The caller sets Dir, Env, SysProcAttr and the streams.
	Command func(name string, args ...string) *exec.Cmd
	// RunOpenCode and RunCaddy start OpenCode and Caddy when they are installed. Off by
	// default: their configs bind the fixed ports 4096 and 20000, which several local
	// sandboxes (or other programs) on one machine cannot share.
	RunOpenCode bool
	RunCaddy    bool
	// SidecarTimeout bounds the wait for sandbox-mcp's health; zero means 20s.
	SidecarTimeout time.Duration
	// KillGrace is how long terminated processes get between SIGTERM and SIGKILL;
	// zero means 2s.
	KillGrace time.Duration
	// Logger receives step outcomes; nil discards.
	Logger *slog.Logger
}

// Provider is the local SandboxProvider.
type Provider struct {
	o      Options
	log    *slog.Logger
	client *http.Client

	mu     sync.Mutex
	booted map[string][]int // sandbox id -> process groups this value started
	wg     sync.WaitGroup   // one per started process, done when it is reaped
}

var (
	_ provider.SandboxProvider = (*Provider)(nil)
	_ provider.SandboxChecker  = (*Provider)(nil)
	_ provider.CommandExecer   = (*Provider)(nil)
	_ provider.FileReader      = (*Provider)(nil)
	_ provider.ServiceTester   = (*Provider)(nil)
)

// New checks o and returns a Provider. Call Close when done with it.
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
	for _, d := range []string{"sandboxes", "snapshots", "state"} {
		if err := os.MkdirAll(filepath.Join(o.Root, d), 0o755); err != nil {
			return nil, fmt.Errorf("new local provider: %w", err)
		}
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
	if o.Command == nil {
		o.Command = exec.Command
	}
	if o.SidecarTimeout <= 0 {
		o.SidecarTimeout = 20 * time.Second
	}
	if o.KillGrace <= 0 {
		o.KillGrace = 2 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Provider{o: o, log: log.With("component", "local-provider"),
		client: &http.Client{Timeout: 5 * time.Second}, booted: map[string][]int{}}, nil
}

// Close stops every process of the sandboxes this value booted and waits until they
// are reaped: a local sandbox lives until Terminate or until the Provider that booted
// it is closed, so no process outlives the program. Directories are kept.
func (p *Provider) Close() error {
	p.mu.Lock()
	booted := p.booted
	p.booted = map[string][]int{}
	p.mu.Unlock()
	for id, pgids := range booted {
		killSandboxProcesses(id, pgids, p.o.KillGrace)
	}
	p.wg.Wait()
	return nil
}

// Kind is provider.KindLocal.
func (p *Provider) Kind() provider.Kind { return provider.KindLocal }

// Capabilities: no pause, no auto-pause, no memory snapshots.
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
	// Home is the sandbox's directory.
	Home string
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
	SidecarToken string                `json:"sidecarToken"`
	PGIDs        []int                 `json:"pgids"`
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

// alive reports whether the sandbox exists and its sandbox-mcp process group runs.
func (p *Provider) alive(id string) (state, bool) {
	st, err := p.readState(id)
	if err != nil {
		return st, false
	}
	for _, g := range st.PGIDs {
		if groupAlive(g) {
			return st, true
		}
	}
	return st, false
}

// CheckSandboxes returns the ids whose sandbox is alive, in input order. It only reads
// state files and probes process groups with signal 0.
func (p *Provider) CheckSandboxes(ctx context.Context, ids []string) ([]string, error) {
	out := []string{}
	for _, id := range ids {
		if _, ok := p.alive(id); ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// EnsureSandbox returns opts.CurrentSandboxID when it is alive, else boots a new one.
func (p *Provider) EnsureSandbox(ctx context.Context, opts provider.CreateOptions) (provider.EnsureResult, error) {
	if opts.CurrentSandboxID != "" {
		if st, ok := p.alive(opts.CurrentSandboxID); ok {
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

// snapshotMeta remembers where a snapshot's home was, to rewrite absolute paths.
type snapshotMeta struct {
	Home string `json:"home"`
}

// Snapshot copies the sandbox's home (without its tmp directory: logs, credentials
// and process state do not survive a snapshot) to a new snapshot.
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (provider.SnapshotResult, error) {
	st, err := p.readState(sandboxID)
	if err != nil {
		return provider.SnapshotResult{}, provider.NewProviderError(provider.KindLocal, provider.OpSnapshot,
			fmt.Sprintf("sandbox %s not found", sandboxID), false, err)
	}
	id := newID("snap-")
	dst := filepath.Join(p.o.Root, "snapshots", id)
	if err := copyTree(ctx, st.Home, dst, "tmp"); err != nil {
		os.RemoveAll(dst)
		return provider.SnapshotResult{}, provider.FromError(err, provider.KindLocal, provider.OpSnapshot)
	}
	b, _ := json.Marshal(snapshotMeta{Home: st.Home})
	if err := writeFileAtomic(dst+".json", b, 0o644); err != nil {
		return provider.SnapshotResult{}, provider.FromError(err, provider.KindLocal, provider.OpSnapshot)
	}
	return provider.SnapshotResult{SnapshotID: id}, nil
}

// copyTree copies src's entries except skip into dst with cp -a (links, modes and
// times kept).
func copyTree(ctx context.Context, src, dst, skip string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	args := []string{"-a"}
	for _, e := range entries {
		if e.Name() != skip {
			args = append(args, filepath.Join(src, e.Name()))
		}
	}
	if len(args) == 1 {
		return nil
	}
	out, err := exec.CommandContext(ctx, "cp", append(args, dst+"/")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, provider.CapOutput(string(out), 1024))
	}
	return nil
}

// Terminate stops every process of the sandbox (its recorded process groups and every
// process that inherited its marker, services included) and removes its directory.
// An unknown or already terminated sandbox is success.
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	if sandboxID == "" {
		return provider.MissingSandboxIDError(provider.KindLocal)
	}
	if !validID(sandboxID) {
		return provider.NewProviderError(provider.KindLocal, provider.OpTerminate, "invalid sandboxId "+sandboxID, false, nil)
	}
	st, err := p.readState(sandboxID)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return provider.FromError(err, provider.KindLocal, provider.OpTerminate)
	}
	killSandboxProcesses(sandboxID, st.PGIDs, p.o.KillGrace)
	home := filepath.Join(p.o.Root, "sandboxes", sandboxID)
	if err := os.RemoveAll(home); err != nil {
		return provider.FromError(err, provider.KindLocal, provider.OpTerminate)
	}
	if err := os.Remove(p.statePath(sandboxID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return provider.FromError(err, provider.KindLocal, provider.OpTerminate)
	}
	return nil
}

// WriteEnvFile merges envVars into the sandbox's env override file.
func (p *Provider) WriteEnvFile(ctx context.Context, sandboxID string, envVars map[string]string) error {
	st, err := p.readState(sandboxID)
	if err != nil {
		return provider.NewProviderError(provider.KindLocal, provider.OpWriteEnvFile, fmt.Sprintf("sandbox %s not found", sandboxID), false, err)
	}
	path := provider.RootedPaths(st.Home).EnvOverrideFile()
	existing, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return provider.FromError(err, provider.KindLocal, provider.OpWriteEnvFile)
	}
	if err := writeFileAtomic(path, provider.MergeEnvFile(existing, envVars), 0o600); err != nil {
		return provider.FromError(err, provider.KindLocal, provider.OpWriteEnvFile)
	}
	return nil
}

// ExecCommand runs argv in the sandbox without a shell, with HOME set to the sandbox,
// cwd (default: the workspace) and env, under the timeout (default 30s). Output is
// capped; a timeout is exit code 124, as with coreutils timeout.
func (p *Provider) ExecCommand(ctx context.Context, sandboxID string, argv []string, o provider.ExecOptions) (provider.ExecResult, error) {
	st, err := p.readState(sandboxID)
	if err != nil {
		return provider.ExecResult{}, provider.NewProviderError(provider.KindLocal, provider.OpExecCommand, fmt.Sprintf("sandbox %s not found", sandboxID), false, err)
	}
	if len(argv) == 0 {
		return provider.ExecResult{}, provider.NewProviderError(provider.KindLocal, provider.OpExecCommand, "argv is empty", false, nil)
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	paths := provider.RootedPaths(st.Home)
	cwd := o.Cwd
	if cwd == "" {
		cwd = paths.Workspace()
	}
	env := map[string]string{}
	for _, kv := range o.Env {
		env[kv.Key] = kv.Value
	}
	res, err := p.runCommand(ctx, sandboxID, paths, argv, cwd, env, timeout)
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
