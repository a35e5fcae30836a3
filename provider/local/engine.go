package local

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Production paths of the binaries bound into every isolated sandbox.
const (
	SandboxMCPPath  = rules.SandboxMCPBin
	ProliferatePath = rules.ProliferateBin
)

// sandboxPATH is the PATH of every command in an isolated sandbox.
const sandboxPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// EngineOptions configure an Engine.
type EngineOptions struct {
	// DataDir holds the engine's state: sandboxes, snapshots, tunnels. Required.
	DataDir string
	// Unisolated runs sandboxes as plain host processes (no namespaces): an explicit
	// opt-in for machines where namespaces are not permitted. Paths inside such a
	// sandbox are host paths; Info.Home is its home directory.
	Unisolated bool
	// SandboxMCP and Proliferate are host paths of the binaries bound read-only at
	// SandboxMCPPath and ProliferatePath inside every isolated sandbox; empty skips.
	SandboxMCP  string
	Proliferate string
	// Logger receives the engine's events; nil discards.
	Logger *slog.Logger
}

// Engine is the local engine.Engine: every sandbox is a tree of processes in its own
// mount, pid, uts, ipc and network namespaces under an init process of this binary.
type Engine struct {
	o    EngineOptions
	dir  string
	caps engine.Capabilities
	log  *slog.Logger
	cg   cgroups

	mu     sync.Mutex
	boxes  map[string]*box
	closed bool
}

var _ engine.Engine = (*Engine)(nil)

// box is one sandbox this Engine knows.
type box struct {
	mu sync.Mutex
	st boxState
	// pending is set while this Engine creates the sandbox.
	pending bool
	// done is closed when init, started by this Engine, has been reaped; nil for a
	// sandbox re-adopted from the data dir.
	done chan struct{}
}

// boxState is dir/sandboxes/<id>/state.json.
type boxState struct {
	ID       string          `json:"id"`
	Name     string          `json:"name,omitempty"`
	Created  time.Time       `json:"created"`
	Spec     engine.Spec     `json:"spec"`
	Isolated bool            `json:"isolated"`
	NetNS    bool            `json:"netns"`
	Pid      int             `json:"pid"`      // init, on the host
	PidStart uint64          `json:"pidStart"` // its start time, against pid reuse
	PidNS    string          `json:"pidNs,omitempty"`
	Tunnels  []engine.Tunnel `json:"tunnels,omitempty"`
	Applied  engine.Limits   `json:"applied,omitempty"`
	Cgroups  []string        `json:"cgroups,omitempty"`
	Paused   bool            `json:"paused,omitempty"`
	Dead     bool            `json:"dead,omitempty"`
	ExitCode *int            `json:"exitCode,omitempty"`
}

// NewEngine opens (or creates) the data dir, re-adopts the sandboxes still alive and
// marks the others dead. In isolated mode it refuses with ErrNotIsolated when this
// process may not create namespaces.
func NewEngine(o EngineOptions) (*Engine, error) {
	if o.DataDir == "" {
		return nil, errors.New("new engine: DataDir is required")
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	for _, d := range []string{"sandboxes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("new engine: %w", err)
		}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Engine{o: o, dir: dir, log: log.With("component", "local-engine"), boxes: map[string]*box{}}
	if !o.Unisolated {
		if err := probeNamespaces(); err != nil {
			return nil, fmt.Errorf("new engine: %w: %v (opt into unisolated mode to run without isolation)", engine.ErrNotIsolated, err)
		}
	}
	e.cg = detectCgroups()
	e.caps = engine.Capabilities{Isolated: !o.Unisolated, Snapshot: true,
		Pause: e.cg.freezer(), Limits: e.cg.limits()}
	if err := e.adopt(); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	return e, nil
}

func nsFlags(netns bool) uintptr {
	f := uintptr(syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC)
	if netns {
		f |= syscall.CLONE_NEWNET
	}
	return f
}

// probeNamespaces starts this binary in its probe mode inside new namespaces.
func probeNamespaces() error {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"sandbox-probe"}
	cmd.Env = []string{initEnv + "=probe"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: nsFlags(true)}
	return cmd.Run()
}

// Capabilities say what this engine does: isolation unless unisolated, pause when the
// cgroup freezer is usable, limits when memory or pids cgroups are.
func (e *Engine) Capabilities() engine.Capabilities { return e.caps }

func (e *Engine) sandboxDir(id string) string { return filepath.Join(e.dir, "sandboxes", id) }

// hostDir maps a path under the sandbox's home, /tmp or /var/tmp to its host path in
// the sandbox directory sd.
func (e *Engine) hostDir(sd, p string) string {
	for _, m := range [][2]string{{rules.HomeDir, dirHome}, {"/var/tmp", dirVarTmp}, {"/tmp", dirTmp}, {"/run", dirRun}} {
		if rest, ok := strings.CutPrefix(p, m[0]); ok && (rest == "" || rest[0] == '/') {
			return filepath.Join(sd, m[1], rest)
		}
	}
	panic("hostDir: " + p + " is not in a writable directory")
}

func newEngineID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func validEngineID(id string) bool {
	if len(id) < 4 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func (e *Engine) saveState(st boxState) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return writeFileAtomic(filepath.Join(e.sandboxDir(st.ID), fileState), b, 0o600)
}

// adopt loads every sandbox of the data dir.
func (e *Engine) adopt() error {
	entries, err := os.ReadDir(filepath.Join(e.dir, "sandboxes"))
	if err != nil {
		return err
	}
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join(e.sandboxDir(ent.Name()), fileState))
		if err != nil {
			continue // a create that never finished; Terminate removes it
		}
		var st boxState
		if json.Unmarshal(b, &st) != nil || st.ID != ent.Name() {
			continue
		}
		bx := &box{st: st}
		e.boxes[st.ID] = bx
		e.refresh(bx) // a sandbox found dead is marked so
	}
	return nil
}

// procStart returns the start time (clock ticks since boot) and state of pid.
func procStart(pid int) (uint64, byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err == nil
}

// initAlive reports whether the sandbox's init still runs.
func initAlive(st boxState) bool {
	if st.Pid <= 0 {
		return false
	}
	start, state, ok := procStart(st.Pid)
	return ok && start == st.PidStart && state != 'Z' && state != 'X'
}

// refresh returns the sandbox's state, marking it dead (and saving that) when its
// init is gone. bx.mu must not be held.
func (e *Engine) refresh(bx *box) engine.State {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return e.refreshLocked(bx)
}

func (e *Engine) refreshLocked(bx *box) engine.State {
	if bx.st.Dead {
		return engine.StateDead
	}
	if initAlive(bx.st) {
		if bx.st.Paused {
			return engine.StatePaused
		}
		return engine.StateRunning
	}
	bx.st.Dead = true
	if b, err := os.ReadFile(filepath.Join(e.sandboxDir(bx.st.ID), fileExit)); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			bx.st.ExitCode = &n
		}
	}
	_ = e.saveState(bx.st)
	return engine.StateDead
}

func (e *Engine) info(bx *box) engine.Info {
	state := e.refresh(bx)
	bx.mu.Lock()
	defer bx.mu.Unlock()
	st := bx.st
	return engine.Info{ID: st.ID, Name: st.Name, State: state, Created: st.Created,
		Tunnels: slices.Clone(st.Tunnels), Labels: st.Spec.Labels, Isolated: st.Isolated,
		Home: filepath.Join(e.sandboxDir(st.ID), dirHome), Applied: st.Applied, ExitCode: st.ExitCode}
}

// lookup finds a sandbox in memory or, made by another Engine on the same data dir,
// on disk. A sandbox whose directory is gone (terminated elsewhere) is forgotten.
func (e *Engine) lookup(id string) (*box, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !validEngineID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, engine.ErrNotFound)
	}
	bx, ok := e.boxes[id]
	if _, err := os.Stat(filepath.Join(e.sandboxDir(id), fileState)); err != nil {
		if ok && !e.creating(bx) {
			delete(e.boxes, id)
		}
		if ok && e.creating(bx) {
			return bx, nil
		}
		return nil, fmt.Errorf("sandbox %q: %w", id, engine.ErrNotFound)
	}
	if ok {
		return bx, nil
	}
	bx, err := e.load(id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, engine.ErrNotFound)
	}
	e.boxes[id] = bx
	return bx, nil
}

// creating reports whether bx is a Create of this Engine still under way.
func (e *Engine) creating(bx *box) bool {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx.pending
}

// load reads a sandbox's state from its directory.
func (e *Engine) load(id string) (*box, error) {
	b, err := os.ReadFile(filepath.Join(e.sandboxDir(id), fileState))
	if err != nil {
		return nil, err
	}
	var st boxState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	if st.ID != id {
		return nil, errors.New("state of another sandbox")
	}
	return &box{st: st}, nil
}

// sync brings the in-memory set in line with the data dir (other Engines may create
// and terminate sandboxes there).
func (e *Engine) sync() {
	entries, err := os.ReadDir(filepath.Join(e.dir, "sandboxes"))
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, ent := range entries {
		seen[ent.Name()] = true
		_, _ = e.lookup(ent.Name())
	}
	e.mu.Lock()
	for id, bx := range e.boxes {
		if !seen[id] && !e.creating(bx) {
			delete(e.boxes, id)
		}
	}
	e.mu.Unlock()
}

// running returns the sandbox when it is alive (running or paused).
func (e *Engine) running(id string) (*box, boxState, error) {
	bx, err := e.lookup(id)
	if err != nil {
		return nil, boxState{}, err
	}
	if e.refresh(bx) == engine.StateDead {
		return nil, boxState{}, fmt.Errorf("sandbox %q is dead: %w", id, engine.ErrNotFound)
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx, bx.st, nil
}

// Get describes one sandbox.
func (e *Engine) Get(ctx context.Context, id string) (engine.Info, error) {
	bx, err := e.lookup(id)
	if err != nil {
		return engine.Info{}, err
	}
	return e.info(bx), nil
}

// List describes every known sandbox, oldest first, each checked for life.
func (e *Engine) List(ctx context.Context) ([]engine.Info, error) {
	e.sync()
	e.mu.Lock()
	boxes := make([]*box, 0, len(e.boxes))
	for _, bx := range e.boxes {
		boxes = append(boxes, bx)
	}
	e.mu.Unlock()
	out := make([]engine.Info, 0, len(boxes))
	for _, bx := range boxes {
		out = append(out, e.info(bx))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Create starts a sandbox and returns once its init serves exec.
func (e *Engine) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	id := newEngineID("sb-")
	sd := e.sandboxDir(id)
	bx := &box{st: boxState{ID: id, Name: spec.Name, Created: time.Now().UTC(), Spec: spec,
		Isolated: !e.o.Unisolated, NetNS: !e.o.Unisolated && !spec.Network}}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return engine.Info{}, errors.New("create sandbox: engine is closed")
	}
	if spec.Name != "" {
		for _, o := range e.boxes {
			o.mu.Lock()
			taken := o.st.Name == spec.Name && !o.st.Dead
			o.mu.Unlock()
			if taken && e.refresh(o) != engine.StateDead {
				e.mu.Unlock()
				return engine.Info{}, fmt.Errorf("create sandbox: %q: %w", spec.Name, engine.ErrNameTaken)
			}
		}
	}
	// Reserved under the name; dead until init runs.
	bx.st.Dead = true
	bx.pending = true
	e.boxes[id] = bx
	e.mu.Unlock()
	info, err := e.create(ctx, bx, sd)
	bx.mu.Lock()
	bx.pending = false
	bx.mu.Unlock()
	if err != nil {
		e.mu.Lock()
		delete(e.boxes, id)
		e.mu.Unlock()
		e.destroy(bx)
		return engine.Info{}, fmt.Errorf("create sandbox: %w", err)
	}
	return info, nil
}

func (e *Engine) create(ctx context.Context, bx *box, sd string) (engine.Info, error) {
	spec := bx.st.Spec
	for _, d := range []string{dirHome, dirTmp, dirVarTmp, dirRun} {
		mode := os.FileMode(0o755)
		if d == dirTmp || d == dirVarTmp {
			mode = 0o1777
		}
		if err := os.MkdirAll(filepath.Join(sd, d), mode); err != nil {
			return engine.Info{}, err
		}
		_ = os.Chmod(filepath.Join(sd, d), mode)
	}
	if spec.Snapshot != "" {
		if err := e.restoreSnapshot(ctx, spec.Snapshot, sd); err != nil {
			return engine.Info{}, err
		}
	}
	if !e.o.Unisolated {
		// The production layout: the workspace, the home's .proliferate and the
		// sidecar's state dir exist from the start.
		for _, d := range []string{rules.WorkspaceDir, rules.HomeDir + "/.proliferate", rules.StateDir} {
			if err := os.MkdirAll(e.hostDir(sd, d), 0o755); err != nil {
				return engine.Info{}, err
			}
		}
	}
	cfg := initConfig{ID: bx.st.ID, Dir: sd, Isolated: bx.st.Isolated, NetNS: bx.st.NetNS,
		Hide: []string{e.dir}}
	if spec.Timeout > 0 {
		cfg.DeadlineMs = time.Now().Add(spec.Timeout).UnixMilli()
	}
	if bx.st.Isolated {
		for _, b := range [][2]string{{e.o.SandboxMCP, SandboxMCPPath}, {e.o.Proliferate, ProliferatePath}} {
			if b[0] != "" {
				cfg.Binds = append(cfg.Binds, bindMount{Source: b[0], Target: b[1], ReadOnly: true})
			}
		}
		for _, m := range spec.Mounts {
			if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
				return engine.Info{}, fmt.Errorf("mount %s -> %s: paths must be absolute", m.Source, m.Target)
			}
			cfg.Binds = append(cfg.Binds, bindMount{Source: m.Source, Target: filepath.Clean(m.Target), ReadOnly: m.ReadOnly})
		}
	} else if len(spec.Mounts) > 0 {
		return engine.Info{}, fmt.Errorf("mounts need an isolated sandbox: %w", engine.ErrUnsupported)
	}
	// The tunnels' host listeners are made here, on the host's network, and handed to
	// init, which serves them from inside: they live exactly as long as the sandbox.
	var lns []*os.File
	defer func() {
		for _, f := range lns {
			f.Close()
		}
	}()
	for _, p := range spec.Ports {
		if p <= 0 || p > 65535 {
			return engine.Info{}, fmt.Errorf("port %d is out of range", p)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return engine.Info{}, fmt.Errorf("tunnel for port %d: %w", p, err)
		}
		f, err := ln.(*net.TCPListener).File()
		ln.Close()
		if err != nil {
			return engine.Info{}, fmt.Errorf("tunnel for port %d: %w", p, err)
		}
		lns = append(lns, f)
		cfg.Tunnels = append(cfg.Tunnels, p)
		bx.st.Tunnels = append(bx.st.Tunnels, engine.Tunnel{Port: p, Host: "127.0.0.1", HostPort: ln.Addr().(*net.TCPAddr).Port})
	}
	if spec.Egress && bx.st.NetNS {
		f, err := os.Open("/proc/self/ns/net")
		if err != nil {
			return engine.Info{}, fmt.Errorf("egress: %w", err)
		}
		lns = append(lns, f)
		cfg.HostNetFd = 5 + len(cfg.Tunnels)
	}
	if err := e.startInit(ctx, bx, cfg, lns); err != nil {
		return engine.Info{}, err
	}
	bx.mu.Lock()
	err := e.saveState(bx.st)
	bx.mu.Unlock()
	if err != nil {
		return engine.Info{}, err
	}
	return e.info(bx), nil
}

// startInit starts the sandbox's init and waits until it serves its control socket.
func (e *Engine) startInit(ctx context.Context, bx *box, cfg initConfig, tunnels []*os.File) error {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return err
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, fileInitLg), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"sandbox-init"}
	cmd.Env = []string{initEnv + "=1", "PATH=" + sandboxPATH}
	cmd.ExtraFiles = append([]*os.File{cfgR, readyW}, tunnels...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cfg.Isolated {
		cmd.SysProcAttr.Cloneflags = nsFlags(cfg.NetNS)
	}
	err = cmd.Start()
	cfgR.Close()
	readyW.Close()
	if err != nil {
		cfgW.Close()
		readyR.Close()
		if cfg.Isolated && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL)) {
			return fmt.Errorf("%w: %v", engine.ErrNotIsolated, err)
		}
		return fmt.Errorf("start init: %w", err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	start, _, _ := procStart(pid)
	pidns := ""
	if cfg.Isolated {
		pidns, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	}
	bx.mu.Lock()
	bx.done = done
	bx.st.Pid, bx.st.PidStart, bx.st.PidNS = pid, start, pidns
	bx.st.Dead = false
	// Saved at once: whoever finds the directory can end this init.
	err = e.saveState(bx.st)
	bx.st.Dead = true
	bx.mu.Unlock()
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return err
	}
	// Limits and the freezer apply before init starts anything.
	applied, groups := e.cg.join(bx.st.ID, pid, bx.st.Spec.Limits)
	bx.mu.Lock()
	bx.st.Applied, bx.st.Cgroups = applied, groups
	bx.mu.Unlock()
	b, _ := json.Marshal(cfg)
	_, _ = cfgW.Write(b)
	cfgW.Close()
	type answer struct {
		line string
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(readyR).ReadString('\n')
		ch <- answer{strings.TrimSpace(line), err}
	}()
	select {
	case a := <-ch:
		readyR.Close()
		if a.line != "ok" {
			msg := strings.TrimPrefix(a.line, "error: ")
			if msg == "" {
				msg = fmt.Sprint(a.err)
			}
			return fmt.Errorf("sandbox init: %s", msg)
		}
	case <-ctx.Done():
		readyR.Close()
		return ctx.Err()
	}
	bx.mu.Lock()
	bx.st.Dead = false
	bx.mu.Unlock()
	return nil
}

// destroy kills the sandbox's processes, closes its tunnels and removes its
// cgroups and directory.
func (e *Engine) destroy(bx *box) error {
	bx.mu.Lock()
	st := bx.st
	done := bx.done
	bx.mu.Unlock()
	if st.Paused || len(st.Cgroups) > 0 {
		e.cg.thaw(st.Cgroups)
	}
	if st.Pid > 0 {
		if initAlive(st) {
			_ = syscall.Kill(st.Pid, syscall.SIGKILL)
		}
		if !st.Isolated {
			killSandboxProcesses(st.ID, []int{st.Pid}, 500*time.Millisecond)
		}
		if done != nil {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("sandbox %s: init did not exit", st.ID)
			}
		}
		if err := waitGone(st, 10*time.Second); err != nil {
			return err
		}
	}
	e.cg.remove(st.Cgroups)
	if err := os.RemoveAll(e.sandboxDir(st.ID)); err != nil {
		return err
	}
	return nil
}

// waitGone waits until no process of the sandbox is left in /proc: init (by pid
// and start time) and, for an isolated sandbox, any process in its pid namespace.
func waitGone(st boxState, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if !procLeft(st) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox %s: processes are left after %v", st.ID, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func procLeft(st boxState) bool {
	if start, _, ok := procStart(st.Pid); ok && start == st.PidStart {
		return true
	}
	if st.PidNS == "" {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, ent := range entries {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		if ns, err := os.Readlink("/proc/" + ent.Name() + "/ns/pid"); err == nil && ns == st.PidNS {
			return true
		}
	}
	return false
}

// Terminate kills everything in the sandbox and removes its tunnels, cgroups and
// directory; an unknown sandbox is success.
func (e *Engine) Terminate(ctx context.Context, id string) error {
	bx, err := e.lookup(id)
	if err != nil {
		if !validEngineID(id) {
			return nil
		}
		// A directory without a state (a crash before init started) is removed too.
		sd := e.sandboxDir(id)
		if _, err := os.Stat(sd); err == nil {
			return os.RemoveAll(sd)
		}
		return nil
	}
	if err := e.destroy(bx); err != nil {
		return fmt.Errorf("terminate %s: %w", id, err)
	}
	e.mu.Lock()
	if e.boxes[id] == bx {
		delete(e.boxes, id)
	}
	e.mu.Unlock()
	return nil
}

// Close ends this Engine's use of the data dir; sandboxes and their tunnels (served by
// their init) keep running.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return nil
}

// environ is the environment of an exec: defaults, the spec's env, then the request's.
func (e *Engine) environ(st boxState, extra []string) []string {
	m := map[string]string{"PATH": sandboxPATH, "HOME": "/home/user", "USER": "root", "LANG": "C.UTF-8",
		"HOSTNAME": st.ID}
	if !st.Isolated {
		m["PATH"] = os.Getenv("PATH")
		m["HOME"] = filepath.Join(e.sandboxDir(st.ID), dirHome)
	}
	var keys []string
	for _, list := range [][]string{st.Spec.Env, extra} {
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			if k != "" {
				m[k] = v
			}
		}
	}
	if st.Spec.Egress && st.NetNS {
		for k, v := range proxyEnv() {
			if _, set := m[k]; !set {
				m[k] = v
			}
		}
	}
	if !st.Isolated {
		m[markerEnv] = st.ID
	}
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}

// dialControl connects to the sandbox's init. The socket is reached through an open
// directory descriptor so the data dir's length never hits the 108-byte limit.
func (e *Engine) dialControl(ctx context.Context, id string) (net.Conn, error) {
	fd, err := unix.Open(e.sandboxDir(id), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var d net.Dialer
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd)+"/"+fileCtl)
}

// Exec runs req inside the sandbox. A command that cannot start (not found, not
// executable) is exit code 127 or 126 with the reason on Stderr, as from a shell. A
// timeout is exit code 124 and an error wrapping engine.ErrTimeout. Exec returns when
// the command is done; like os/exec, a goroutine copies req.Stdin until its Read
// returns, so a Stdin that never ends should be closed by the caller.
func (e *Engine) Exec(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	code, _, err := e.exec(ctx, id, req, false)
	return code, err
}

func (e *Engine) exec(ctx context.Context, id string, req engine.ExecRequest, detach bool) (int, int, error) {
	_, st, err := e.running(id)
	if err != nil {
		return -1, 0, err
	}
	if len(req.Argv) == 0 {
		return -1, 0, errors.New("exec: argv is empty")
	}
	if st.Paused {
		return -1, 0, fmt.Errorf("exec in sandbox %s: it is paused", id)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/home/user"
		if !st.Isolated {
			cwd = filepath.Join(e.sandboxDir(id), dirHome)
		}
	}
	conn, err := e.dialControl(ctx, id)
	if err != nil {
		return -1, 0, fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	cr := ctlRequest{Op: "exec", Argv: req.Argv, Cwd: cwd, Env: e.environ(st, req.Env),
		TimeoutMs: req.Timeout.Milliseconds(), Detach: detach, Stdin: req.Stdin != nil && !detach,
		TTY: req.TTY && !detach, Cols: req.Size.Cols, Rows: req.Size.Rows}
	if req.Timeout > 0 && cr.TimeoutMs == 0 {
		cr.TimeoutMs = 1
	}
	if err := writeRequest(conn, cr); err != nil {
		return -1, 0, e.execErr(ctx, id, err)
	}
	fw := &frameWriter{w: conn}
	if cr.Stdin {
		go func() {
			_, _ = io.Copy(streamWriter{fw, frameStdin}, req.Stdin)
			_ = fw.write(frameStdinEOF, nil)
		}()
	}
	if cr.TTY && req.Resize != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-done:
					return
				case ws, ok := <-req.Resize:
					if !ok {
						return
					}
					var b [4]byte
					binary.BigEndian.PutUint16(b[:], ws.Cols)
					binary.BigEndian.PutUint16(b[2:], ws.Rows)
					if fw.write(frameResize, b[:]) != nil {
						return
					}
				}
			}
		}()
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var buf []byte
	for {
		typ, p, err := readFrame(br, buf)
		if err != nil {
			return -1, 0, e.execErr(ctx, id, err)
		}
		buf = p[:0]
		switch typ {
		case frameStdout:
			_, _ = stdout.Write(p)
		case frameStderr:
			_, _ = stderr.Write(p)
		case frameExit:
			var x exitFrame
			if err := json.Unmarshal(p, &x); err != nil {
				return -1, 0, fmt.Errorf("exec in sandbox %s: %w", id, err)
			}
			if x.TimedOut {
				return 124, x.Pid, fmt.Errorf("exec %q: %w after %v", req.Argv[0], engine.ErrTimeout, req.Timeout)
			}
			if x.Error != "" {
				if x.Code < 0 {
					return -1, 0, fmt.Errorf("exec in sandbox %s: %s", id, x.Error)
				}
				fmt.Fprintln(stderr, x.Error)
			}
			return x.Code, x.Pid, nil
		}
	}
}

func (e *Engine) execErr(ctx context.Context, id string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, _, rerr := e.running(id); rerr != nil {
		return rerr
	}
	return fmt.Errorf("exec in sandbox %s: %w", id, err)
}

// StartDetached starts argv in its own session inside the sandbox with /dev/null as its
// streams and returns its pid (inside the sandbox) at once.
func (e *Engine) StartDetached(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	code, pid, err := e.exec(ctx, id, req, true)
	if err == nil && code != 0 {
		err = fmt.Errorf("start %q: exit code %d", req.Argv[0], code)
	}
	return pid, err
}

// errIsNotExist keeps fs.ErrNotExist visible through our wrapping.
var _ = fs.ErrNotExist
