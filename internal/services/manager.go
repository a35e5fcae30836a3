package services

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
)

// Config configures a Manager. StateDir and WorkspaceDir are required.
type Config struct {
	// StateDir holds state.json, state.lock, logs/ and run/.
	StateDir string
	// WorkspaceDir is the working directory of services started without cwd.
	WorkspaceDir string
	Logger       *slog.Logger

	// StopTimeout is the grace between the stop signal and SIGKILL; default 5 s.
	StopTimeout time.Duration
	// LogMaxBytes is the size at which a log rotates; default 10 MiB, negative disables rotation.
	LogMaxBytes int64
	// LogKeep is how many rotated files are kept (name.log.1 …); default 2.
	LogKeep int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Executable is the binary re-executed as the service monitor; default
	// os.Executable(). It must call RunMonitorIfRequested first thing.
	Executable string
	// Environ is the environment services inherit; default os.Environ().
	Environ []string

	// BackoffBase, BackoffMax and BackoffReset shape restarts: BackoffBase
	// doubling up to BackoffMax, back to BackoffBase once a run lasted
	// BackoffReset. Defaults 1 s, 60 s, 30 s.
	BackoffBase, BackoffMax, BackoffReset time.Duration
	// PollInterval is how often re-adopted services are checked; default 200 ms.
	PollInterval time.Duration
	// ReadinessTimeout applies when a readiness probe gives no timeoutMs; default 60 s.
	ReadinessTimeout time.Duration
	// EventBuffer is each subscriber's buffer; default 256. A full subscriber misses events.
	EventBuffer int
	// AckTimeout is how long a monitor runs a service before the sidecar
	// acknowledges its record; without the ack it stops the run. Default 30 s.
	AckTimeout time.Duration
}

// Manager starts, stops, lists and supervises services. It is safe for
// concurrent use, and several processes may share one state dir.
type Manager struct {
	cfg       Config
	log       *slog.Logger
	statePath string
	logDir    string
	runDir    string
	bash      string
	// prefix starts every instance id of this state dir (see statePrefix).
	prefix string

	writeMu sync.Mutex // serializes read-modify-write of the state file in this process
	mu      sync.RWMutex
	st      *stateFile // last state read or written; never mutated in place
	stamp   fileStamp
	gen     uint64 // bumped whenever st is replaced; see ListVersion
	// pending is set when st could not be written (disk full, state dir
	// gone read-only): st is then newer than the file, and is written again
	// by the sync loop and by the next update.
	pending bool

	namesMu sync.Mutex
	names   map[string]*sync.Mutex

	instMu sync.Mutex
	inst   map[string]*instance // current run per name, started or adopted here

	subMu sync.Mutex
	subs  map[*subscriber]struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// instance is one run of a service that this Manager watches.
type instance struct {
	name      string
	id        string
	spec      spec // the options of the run, as recorded
	t         target
	startedAt time.Time
	logOffset int64

	cmd    *exec.Cmd // the monitor, when started by this process
	status *os.File  // the monitor's status pipe, when started by this process
	br     *bufio.Reader

	ctx        context.Context // ends when the run is stopped
	cancel     context.CancelFunc
	stopping   atomic.Bool
	exited     chan struct{} // the main process ended
	gone       chan struct{} // the monitor ended: nothing of the run is left
	failReason atomic.Pointer[string]
}

// newInstance is the only place an instance is built: whether launched here
// or adopted, a run's context ends with the Manager's and its exited and gone
// channels are open until the run ends.
func (m *Manager) newInstance(name, id string, sp spec, t target, startedAt time.Time) *instance {
	ctx, cancel := context.WithCancel(m.ctx)
	return &instance{
		name: name, id: id, spec: sp, t: t, startedAt: startedAt,
		ctx: ctx, cancel: cancel,
		exited: make(chan struct{}), gone: make(chan struct{}),
	}
}

// New loads the state file and re-adopts the services still running.
func New(cfg Config) (*Manager, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("services: StateDir is required")
	}
	if cfg.WorkspaceDir == "" {
		return nil, errors.New("services: WorkspaceDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	if cfg.LogMaxBytes == 0 {
		cfg.LogMaxBytes = 10 << 20
	}
	if cfg.LogKeep <= 0 {
		cfg.LogKeep = 2
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ()
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 60 * time.Second
	}
	if cfg.BackoffReset <= 0 {
		cfg.BackoffReset = 30 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.ReadinessTimeout <= 0 {
		cfg.ReadinessTimeout = 60 * time.Second
	}
	if cfg.EventBuffer <= 0 {
		cfg.EventBuffer = 256
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = defaultAckTimeout
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("services: find own executable: %w", err)
		}
		cfg.Executable = exe
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("services: find bash: %w", err)
	}
	m := &Manager{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "services"),
		statePath: statefile.Path(cfg.StateDir),
		logDir:    filepath.Join(cfg.StateDir, "logs"),
		runDir:    filepath.Join(cfg.StateDir, "run"),
		bash:      bash,
		st:        newState(),
		names:     map[string]*sync.Mutex{},
		inst:      map[string]*instance{},
		subs:      map[*subscriber]struct{}{},
	}
	if err := m.makeDirs(); err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	m.prefix = statePrefix(cfg.StateDir)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	// No launch runs anywhere while launch.lock is held exclusively: the
	// sweep sees no run half-recorded, and adopt no live restart claim.
	unlockLaunch, lerr := m.lockLaunch(true)
	if lerr != nil {
		m.log.Warn("orphan sweep skipped", "err", lerr)
	} else {
		m.sweepOrphans()
	}
	err = m.adopt()
	if unlockLaunch != nil {
		unlockLaunch()
	}
	if err != nil {
		m.cancel()
		m.wg.Wait()
		return nil, err
	}
	m.wg.Add(1)
	go m.syncLoop()
	return m, nil
}

// Close stops supervising and waits for the manager's goroutines. Services keep running.
func (m *Manager) Close() error {
	m.cancel()
	m.instMu.Lock()
	for _, in := range m.inst {
		if in.status != nil {
			in.status.Close()
		}
	}
	m.instMu.Unlock()
	m.wg.Wait()
	m.subMu.Lock()
	for s := range m.subs {
		s.close()
	}
	m.subs = map[*subscriber]struct{}{}
	m.subMu.Unlock()
	return nil
}

func (m *Manager) now() time.Time { return m.cfg.Now() }

func (m *Manager) current(name string) *instance {
	m.instMu.Lock()
	defer m.instMu.Unlock()
	return m.inst[name]
}

func (m *Manager) setCurrent(in *instance) {
	m.instMu.Lock()
	m.inst[in.name] = in
	m.instMu.Unlock()
}

// makeDirs creates the state dir and its logs/ and run/ (again, when they were deleted).
func (m *Manager) makeDirs() error {
	for _, d := range []string{m.cfg.StateDir, m.logDir, m.runDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}
