package local

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/cgroup"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/oci"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/volume"
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
	// Unisolated runs sandboxes as plain host processes (no OCI runtime, no
	// namespaces, no isolation at all): an explicit opt-in for machines without root or
	// a runtime. Paths inside such a
	// sandbox are host paths; Info.Home is its home directory.
	Unisolated bool
	// SandboxMCP and Proliferate are host paths of the binaries bound read-only at
	// SandboxMCPPath and ProliferatePath inside every isolated sandbox; empty skips.
	SandboxMCP  string
	Proliferate string
	// Images resolves Spec.Image to the layers of an overlay root; nil refuses
	// Spec.Image (ErrUnsupported), and sandboxes get the host's system directories.
	Images engine.ImageResolver
	// Logger receives the engine's events; nil discards.
	Logger *slog.Logger
}

// Engine is the local engine.Engine: every sandbox is a container of an OCI runtime
// (runc), whose PID 1 is this binary in its init mode, beside a host-side shim
// (shim.go) that holds what stays outside.
type Engine struct {
	o    EngineOptions
	dir  string
	caps engine.Capabilities
	log  *slog.Logger
	cg   cgroup.Hierarchies
	// vols are the data dir's volumes, disks the templates of sandboxes' disks.
	vols  *volume.Store
	disks *volume.Disks
	// runtime is the OCI runtime binary; initBinary this binary, bound into every
	// sandbox as its init.
	runtime, initBinary string

	mu     sync.Mutex
	boxes  map[string]*box
	closed bool
}

var _ engine.Engine = (*Engine)(nil)

// box is one sandbox this Engine knows.
type box struct {
	mu sync.Mutex
	st state.Record
	// pending is set while this Engine creates the sandbox.
	pending bool
	// done is closed when init, started by this Engine, has been reaped; nil for a
	// sandbox re-adopted from the data dir.
	done chan struct{}
	// gone is set while destroy removes the sandbox: nothing writes its state file
	// any more (a write racing the directory's removal would leave it behind).
	gone bool
}

// NewEngine opens (or creates) the data dir, re-adopts the sandboxes still alive and
// marks the others dead. In isolated mode it refuses with ErrNotIsolated when the
// machine has no OCI runtime (naming the package to install) or this process is not
// root.
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
	if err := privateDataDir(dir); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Engine{o: o, dir: dir, log: log.With("component", "local-engine"), boxes: map[string]*box{}}
	e.vols = volume.NewStore(filepath.Join(dir, "volumes"), e.volumeUsers, e.log)
	e.disks = volume.NewDisks(filepath.Join(dir, "disks"))
	if !o.Unisolated {
		if e.runtime, err = oci.Find(oci.Runc); err != nil {
			return nil, fmt.Errorf("new engine: %w", err)
		}
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("new engine: %w: %s runs sandboxes for root only: run as root (or opt into unisolated mode, which has no isolation)", engine.ErrNotIsolated, oci.Runc)
		}
		if e.initBinary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("new engine: this binary's path, to bind as the sandboxes' init: %w", err)
		}
	}
	e.cg = cgroup.Detect()
	// Groups a terminate could not remove in time (see cgroup.Hierarchies.Remove).
	e.cg.Sweep(cgroup.SandboxPrefix, time.Minute)
	e.caps = engine.Capabilities{Isolated: !o.Unisolated, Snapshot: true,
		Pause: e.cg.Freezer(), Limits: e.cg.Limits(), DialPort: true,
		Volumes: !o.Unisolated && volume.Usable(), Images: o.Images != nil && !o.Unisolated,
		Runtimes: []string{oci.Runc}, Names: true, TTY: true, FileErrors: true, ExecKill: true}
	if o.Unisolated {
		e.caps.Runtimes = []string{oci.None}
	}
	if err := e.adopt(); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	return e, nil
}

// Capabilities say what this engine does: isolation unless unisolated, pause when the
// cgroup freezer is usable, limits when memory or pids cgroups are.
func (e *Engine) Capabilities() engine.Capabilities { return e.caps }

// runtimeRoot is the runtime's state directory (--root): under the data dir, so
// engines of other data dirs never share container names.
func (e *Engine) runtimeRoot() string { return filepath.Join(e.dir, "runtime") }

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

// Close ends this Engine's use of the data dir; sandboxes and their tunnels (served by
// their shims) keep running.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return nil
}
