package services

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"

	"github.com/proliferate-ai/sandbox-mcp/rules"
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
	req       apitype.StartServiceRequest
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
		statePath: filepath.Join(cfg.StateDir, "state.json"),
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
	m.sweepOrphans()
	if err := m.adopt(); err != nil {
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

// lockName serializes start, stop and restart of one name.
func (m *Manager) lockName(name string) func() {
	m.namesMu.Lock()
	mu, ok := m.names[name]
	if !ok {
		mu = &sync.Mutex{}
		m.names[name] = mu
	}
	m.namesMu.Unlock()
	mu.Lock()
	return mu.Unlock
}

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

// update applies fn to the freshest state under the cross-process lock and
// writes the result atomically. When the write fails (disk full, state dir
// read-only) the new state is kept in memory, so what callers see follows
// what actually happened, and it is written once writing works again; update
// then succeeds all the same. Use updateDurable when the caller must not go
// on unless the change is on disk.
func (m *Manager) update(fn func(st *stateFile) error) error {
	return m.updateState(false, fn)
}

// updateDurable is update that fails, and changes nothing, unless the new
// state was written to disk.
func (m *Manager) updateDurable(fn func(st *stateFile) error) error {
	return m.updateState(true, fn)
}

func (m *Manager) updateState(durable bool, fn func(st *stateFile) error) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	unlock, err := m.lockState()
	if err != nil {
		if durable {
			return err
		}
		// Without the lock no other process can be kept in step; this
		// process's own view still follows what happened.
		m.log.Warn("state lock unavailable; keeping the change in memory", "err", err)
		unlock = func() {}
	}
	defer unlock()
	st, stamp, raw, err := m.readForUpdate()
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	if err := fn(st); err != nil {
		return err
	}
	b, err := encodeState(st)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	// The same content is not written again (nor fsynced): a restarted
	// sidecar that finds every service as recorded writes nothing.
	if raw == nil || !bytes.Equal(b, raw) {
		var werr error
		if stamp, werr = writeState(m.statePath, b); werr != nil {
			if durable {
				return fmt.Errorf("save state: %w", werr)
			}
			m.mu.Lock()
			if !m.pending {
				m.log.Error("cannot write the state file; keeping the state in memory and retrying", "err", werr)
			}
			m.st, m.pending = st.clone(), true
			m.gen++
			m.mu.Unlock()
			return nil
		}
	}
	m.mu.Lock()
	if m.pending {
		m.log.Info("state file written again")
	}
	m.st, m.stamp, m.pending = st.clone(), stamp, false
	m.gen++
	m.mu.Unlock()
	return nil
}

// lockState takes the cross-process state lock, recreating the state dir
// when it was deleted.
func (m *Manager) lockState() (func(), error) {
	unlock, err := flock(m.cfg.StateDir)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return unlock, err
	}
	if derr := m.makeDirs(); derr != nil {
		return nil, fmt.Errorf("%w (recreate state dir: %w)", err, derr)
	}
	m.log.Warn("state dir was deleted; created it again", "dir", m.cfg.StateDir)
	return flock(m.cfg.StateDir)
}

// readForUpdate returns the state an update starts from: the file, unless
// this process holds changes it could not write or the file was lost, in
// which case the state in memory is the truth. A file that cannot be used
// (corrupt, not a regular file, unreadable) is moved aside.
func (m *Manager) readForUpdate() (*stateFile, fileStamp, []byte, error) {
	m.mu.RLock()
	mem, pending, seen := m.st.clone(), m.pending, m.stamp != (fileStamp{})
	m.mu.RUnlock()
	if pending {
		return mem, fileStamp{}, nil, nil
	}
	st, stamp, raw, err := readStateRaw(m.statePath)
	if errors.Is(err, errCorrupt) {
		dst, qerr := quarantine(m.statePath, m.now())
		m.log.Error("state file is unusable; moved aside", "err", err, "moved_to", dst, "move_err", qerr)
		return mem, fileStamp{}, nil, nil
	}
	if err != nil {
		return nil, fileStamp{}, nil, err
	}
	if raw == nil && seen {
		m.log.Warn("state file disappeared; writing it again from memory", "path", m.statePath)
		return mem, fileStamp{}, nil, nil
	}
	for _, p := range sanitizeState(st) {
		m.log.Warn("state file entry refused", "problem", p)
	}
	return st, stamp, raw, nil
}

// refresh re-reads the state file when another process replaced it.
func (m *Manager) refresh() {
	stamp, err := statStamp(m.statePath)
	if err != nil {
		return
	}
	m.mu.RLock()
	same := stamp == m.stamp || m.pending
	m.mu.RUnlock()
	if same {
		return
	}
	st, stamp, err := readState(m.statePath)
	if errors.Is(err, errCorrupt) {
		// Replaced by something unusable while running: move it aside and
		// write the state this process knows.
		_ = m.update(func(*stateFile) error { return nil })
		return
	}
	if err != nil {
		m.log.Warn("read state file", "err", err)
		return
	}
	sanitizeState(st)
	m.mu.Lock()
	if !m.pending {
		m.st, m.stamp = st, stamp
		m.gen++
	}
	m.mu.Unlock()
}

// flushPending writes the state kept in memory after a failed write.
func (m *Manager) flushPending() {
	m.mu.RLock()
	pending := m.pending
	m.mu.RUnlock()
	if pending {
		_ = m.update(func(*stateFile) error { return nil })
	}
}

func (m *Manager) record(name string) (record, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.st.Services[name]
	if !ok {
		return record{}, false
	}
	return *r, true
}

// List returns every service in the order its name was first started, and the exposed port.
func (m *Manager) List() ([]apitype.ServiceInfo, *int) {
	m.refresh()
	m.mu.RLock()
	recs := make([]*record, 0, len(m.st.Services))
	for _, r := range m.st.Services {
		recs = append(recs, r)
	}
	port := m.st.ExposedPort
	m.mu.RUnlock()
	slices.SortFunc(recs, func(a, b *record) int {
		if a.Order != b.Order {
			return int(a.Order - b.Order)
		}
		return strings.Compare(a.Name, b.Name)
	})
	out := make([]apitype.ServiceInfo, len(recs))
	for i, r := range recs {
		out[i] = r.ServiceInfo
	}
	if port != nil {
		p := *port
		port = &p
	}
	return out, port
}

// ListVersion returns a number that changes whenever what List returns may
// have changed, in this process or in another one sharing the state dir (it
// re-reads state.json first when that was replaced). A caller may keep what it
// derived from List while ListVersion stays the same, provided it read the
// version before calling List.
func (m *Manager) ListVersion() uint64 {
	m.refresh()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gen
}

// Get returns one service; the error matches ErrNotFound for a name never started.
func (m *Manager) Get(name string) (apitype.ServiceInfo, error) {
	if ValidateName(name) != nil {
		return apitype.ServiceInfo{}, notFound(name)
	}
	m.refresh()
	r, ok := m.record(name)
	if !ok {
		return apitype.ServiceInfo{}, notFound(name)
	}
	return r.ServiceInfo, nil
}

// ExposedPort returns the port the preview routes to, or nil.
func (m *Manager) ExposedPort() *int {
	_, p := m.List()
	return p
}

// SetExposedPort records the exposed port in the state file and emits an "exposed" event.
func (m *Manager) SetExposedPort(port int) error {
	if port < 1 || port > 65535 {
		return invalidf("port must be an integer from 1 to 65535")
	}
	err := m.update(func(st *stateFile) error {
		st.ExposedPort = &port
		return nil
	})
	if err != nil {
		return fmt.Errorf("set exposed port: %w", err)
	}
	m.emit(apitype.Event{Type: apitype.EventExposed, Port: &port})
	return nil
}

// LogPath returns <StateDir>/logs/<name>.log. The error matches ErrInvalid
// for a bad name and ErrNotFound when the service is unknown and has no log.
func (m *Manager) LogPath(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	p := filepath.Join(m.logDir, name+".log")
	if _, ok := m.record(name); ok {
		return p, nil
	}
	if _, err := os.Stat(p); err != nil {
		return "", &userError{kind: ErrNotFound, msg: rules.NoLogs(name)}
	}
	return p, nil
}

var stopSignals = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM,
	"SIGINT":  syscall.SIGINT,
	"SIGHUP":  syscall.SIGHUP,
	"SIGQUIT": syscall.SIGQUIT,
}

// maxCommandBytes is the longest command `bash -c` can be given: the
// kernel's limit of one argument (MAX_ARG_STRLEN, 128 KiB with its NUL).
const maxCommandBytes = 128<<10 - 1

// normalize validates req and fills its defaults (cwd, restart policy).
func (m *Manager) normalize(req apitype.StartServiceRequest) (apitype.StartServiceRequest, error) {
	if req.Name == "" || strings.TrimSpace(req.Command) == "" {
		return req, invalidf("name and command are required")
	}
	if err := ValidateName(req.Name); err != nil {
		return req, err
	}
	if err := m.checkStart(req); err != nil {
		return req, err
	}
	if strings.IndexByte(req.Command, 0) >= 0 {
		return req, invalidf("command must not contain NUL bytes")
	}
	if len(req.Command) > maxCommandBytes {
		return req, invalidf("command is %d bytes long; the limit is %d", len(req.Command), maxCommandBytes)
	}
	if req.Cwd == "" {
		req.Cwd = m.cfg.WorkspaceDir
	} else if !filepath.IsAbs(req.Cwd) {
		req.Cwd = filepath.Join(m.cfg.WorkspaceDir, req.Cwd)
	}
	fi, err := os.Stat(req.Cwd)
	switch {
	case err != nil:
		return req, invalidf("cwd %q does not exist", req.Cwd)
	case !fi.IsDir():
		return req, invalidf("cwd %q is not a directory", req.Cwd)
	}
	switch req.Restart {
	case "":
		req.Restart = apitype.RestartNo
	case apitype.RestartNo, apitype.RestartOnFailure, apitype.RestartAlways:
	default:
		return req, invalidf("restart must be %q, %q or %q", apitype.RestartNo, apitype.RestartOnFailure, apitype.RestartAlways)
	}
	if req.MaxRestarts != nil && *req.MaxRestarts < 0 {
		return req, invalidf("maxRestarts must be 0 or more")
	}
	if req.StopSignal != "" {
		if _, ok := stopSignals[req.StopSignal]; !ok {
			return req, invalidf("stopSignal must be one of SIGTERM, SIGINT, SIGHUP, SIGQUIT")
		}
	}
	if req.StopTimeoutMs != nil && *req.StopTimeoutMs < 0 {
		return req, invalidf("stopTimeoutMs must be 0 or more")
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return req, invalidf("env key %q is not a valid environment variable name", k)
		}
	}
	if rd := req.Readiness; rd != nil {
		n := 0
		if rd.TCP != nil {
			n++
			if *rd.TCP < 1 || *rd.TCP > 65535 {
				return req, invalidf("readiness.tcp must be a port from 1 to 65535")
			}
		}
		if rd.HTTP != "" {
			n++
			u, err := url.Parse(rd.HTTP)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return req, invalidf("readiness.http must be an http:// or https:// URL")
			}
		}
		if rd.Log != "" {
			n++
			if _, err := regexp.Compile(rd.Log); err != nil {
				return req, invalidf("readiness.log is not a valid regular expression: %v", err)
			}
		}
		if n != 1 {
			return req, invalidf("readiness must have exactly one of tcp, http or log")
		}
		if rd.TimeoutMs < 0 {
			return req, invalidf("readiness.timeoutMs must be 0 or more")
		}
	}
	return req, nil
}

// requestOf rebuilds the start request a record was started with.
func requestOf(r *record) apitype.StartServiceRequest {
	return apitype.StartServiceRequest{
		Name: r.Name, Command: r.Command, Cwd: r.Cwd,
		Restart: r.Restart, MaxRestarts: r.MaxRestarts, Readiness: r.Readiness,
		Env: r.Env, StopSignal: r.StopSignal, StopTimeoutMs: r.StopTimeoutMs,
	}
}

func (m *Manager) stopSettings(r *record) (syscall.Signal, time.Duration) {
	sig := syscall.SIGTERM
	if s, ok := stopSignals[r.StopSignal]; ok {
		sig = s
	}
	grace := m.cfg.StopTimeout
	if r.StopTimeoutMs != nil {
		grace = stopGrace(*r.StopTimeoutMs)
	}
	return sig, grace
}

// Start starts req.Name, stopping a running service of that name first.
// Validation errors match ErrInvalid and carry the caller's message.
func (m *Manager) Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	req, err := m.normalize(req)
	if err != nil {
		return apitype.ServiceInfo{}, err
	}
	defer m.lockName(req.Name)()
	if err := m.stopLocked(ctx, req.Name); err != nil && !errors.Is(err, ErrNotFound) {
		return apitype.ServiceInfo{}, err
	}
	return m.launch(ctx, req, 0, 0)
}

// Restart stops a service and starts it again with the same command, cwd and options.
func (m *Manager) Restart(ctx context.Context, name string) (apitype.ServiceInfo, error) {
	if ValidateName(name) != nil {
		return apitype.ServiceInfo{}, notFound(name)
	}
	defer m.lockName(name)()
	m.refresh()
	r, ok := m.record(name)
	if !ok {
		return apitype.ServiceInfo{}, notFound(name)
	}
	req, err := m.normalize(requestOf(&r))
	if err != nil {
		return apitype.ServiceInfo{}, err
	}
	if err := m.stopLocked(ctx, name); err != nil {
		return apitype.ServiceInfo{}, err
	}
	return m.launch(ctx, req, 0, 0)
}

// Stop stops a service and everything it started; it returns once nothing of
// it is left. The error matches ErrNotFound for a name never started.
func (m *Manager) Stop(ctx context.Context, name string) error {
	if ValidateName(name) != nil {
		return notFound(name)
	}
	defer m.lockName(name)()
	return m.stopLocked(ctx, name)
}

func (m *Manager) stopLocked(ctx context.Context, name string) error {
	// A caller that goes away must not leave a half-stopped service behind.
	ctx = context.WithoutCancel(ctx)
	m.refresh()
	r, ok := m.record(name)
	if !ok {
		return notFound(name)
	}
	in := m.current(name)
	if in != nil {
		in.stopping.Store(true)
		in.cancel()
	}
	active := r.Status == apitype.StatusRunning || r.NextRestartAt != nil
	if active {
		// Persist the intent first, so a process sharing the state does not
		// take the exit for a crash and restart the service.
		_ = m.update(func(st *stateFile) error {
			if x := st.Services[name]; x != nil && x.Instance == r.Instance {
				x.StopRequested = x.Instance
			}
			return nil
		})
	}
	sig, grace := m.stopSettings(&r)
	kerr := killTree(ctx, r.target(), sig, grace)
	// Wait for the monitor, so the log is complete and the exit handled.
	wait := time.NewTimer(grace + 5*time.Second)
	defer wait.Stop()
	if in != nil && in.id == r.Instance {
		select {
		case <-in.gone:
		case <-wait.C:
		case <-ctx.Done():
		case <-m.ctx.Done():
		}
	} else {
		for alive(r.MonitorPID, r.MonitorStartTime) {
			select {
			case <-wait.C:
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
				continue
			}
			break
		}
	}
	now := m.now().UnixMilli()
	err := m.update(func(st *stateFile) error {
		x := st.Services[name]
		if x == nil || x.Instance != r.Instance {
			return nil
		}
		if active || x.Status == apitype.StatusRunning {
			x.Status = apitype.StatusStopped
			x.StoppedAt = &now
			x.Reason = ""
		}
		x.Ready = false
		x.NextRestartAt = nil
		x.StopRequested = x.Instance
		return nil
	})
	if active {
		m.emit(apitype.Event{Type: apitype.EventStopped, Service: name})
	}
	if kerr != nil {
		return fmt.Errorf("stop service %q: %w", name, kerr)
	}
	if err != nil {
		return fmt.Errorf("stop service %q: %w", name, err)
	}
	return nil
}

// launch starts a monitor running req and records the new run. The record
// comes first: the monitor keeps the service only once it is acknowledged as
// written to disk, and stops it when the ack does not come (this process
// killed, disk full), so no run is ever left that no record names.
func (m *Manager) launch(ctx context.Context, req apitype.StartServiceRequest, restarts, consecutive int) (apitype.ServiceInfo, error) {
	id := m.newInstanceID()
	now := m.now()
	sig, grace := m.stopSettings(&record{ServiceInfo: apitype.ServiceInfo{StopSignal: req.StopSignal, StopTimeoutMs: req.StopTimeoutMs}})
	spec := monitorSpec{
		Name: req.Name, Instance: id, Command: req.Command, Cwd: req.Cwd, Bash: m.bash,
		Env:          m.serviceEnv(req, id),
		LogPath:      filepath.Join(m.logDir, req.Name+".log"),
		LogMaxBytes:  max(m.cfg.LogMaxBytes, 0),
		LogKeep:      m.cfg.LogKeep,
		ExitFile:     m.exitFile(id),
		StartedAt:    now.UTC().Format("2006-01-02T15:04:05.000Z"),
		StopSignal:   int(sig),
		StopTimeout:  grace.Milliseconds(),
		AckTimeoutMs: m.cfg.AckTimeout.Milliseconds(),
	}
	fail := func(err error) (apitype.ServiceInfo, error) {
		return apitype.ServiceInfo{}, fmt.Errorf("start service %q: %w", req.Name, err)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return fail(err)
	}
	// Shared with other launches; the start-up orphan sweep takes it
	// exclusively, so it never takes a run being launched for an orphan.
	unlockLaunch, err := m.lockLaunch(syscall.LOCK_SH)
	if err != nil {
		return fail(err)
	}
	defer unlockLaunch()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	// The spec goes to the monitor's stdin: it holds the whole environment
	// and the command, more than the kernel allows one variable (128 KiB).
	// The ack follows on the same pipe.
	sr, sw, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return fail(err)
	}
	cmd := &exec.Cmd{Path: m.cfg.Executable, Args: []string{monitorName, req.Name}}
	// One P is plenty for a monitor (it copies a pipe to a file) and saves
	// ~150 KiB of private memory per service; the service's own environment
	// is spec.Env, so it does not inherit this.
	cmd.Env = append(filterEnv(m.cfg.Environ, nil), "GOMAXPROCS=1", internalEnv+"="+monitorMode, monitorEnv+"="+id)
	cmd.Stdin = sr
	cmd.ExtraFiles = []*os.File{pw}
	// Its own session: signals to the sidecar's group and terminal never reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		sr.Close()
		sw.Close()
		return fail(fmt.Errorf("start monitor: %w", err))
	}
	pw.Close()
	sr.Close()
	t := target{instance: id, monitor: cmd.Process.Pid}
	// abort takes down whatever of the run exists: the monitor's descendants
	// and every process carrying the instance marker, then the monitor.
	abort := func(err error) (apitype.ServiceInfo, error) {
		sw.Close()
		if t.monStart == 0 {
			if st, serr := readStat(t.monitor); serr == nil {
				t.monStart = st.start
			}
		}
		_ = killTree(context.Background(), t, syscall.SIGKILL, 0)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.monitor, t.monStart = 0, 0
		_ = killTree(context.Background(), t, syscall.SIGKILL, 0)
		pr.Close()
		os.Remove(m.exitFile(id))
		return fail(err)
	}
	// A monitor that cannot take the spec reports it on the status pipe.
	_ = sw.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := sw.Write(append(specJSON, '\n')); err != nil {
		return abort(fmt.Errorf("send spec to monitor: %w", err))
	}
	br := bufio.NewReader(pr)
	_ = pr.SetReadDeadline(time.Now().Add(30 * time.Second))
	msg, err := readMonitorMsg(br)
	_ = pr.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return abort(fmt.Errorf("monitor ended before reporting the start (the service may have killed it): %w", err))
	case msg.Type == msgError:
		return abort(errors.New(msg.Message))
	case msg.Type != msgStarted || msg.PID <= 1:
		return abort(fmt.Errorf("monitor sent %q instead of %q", msg.Type, msgStarted))
	}
	pid := msg.PID
	t = target{pgid: pid, pgidStart: msg.StartTime, instance: id, monitor: cmd.Process.Pid, monStart: msg.MonitorStartTime}
	var info apitype.ServiceInfo
	err = m.updateDurable(func(st *stateFile) error {
		if err := admit(st, req); err != nil {
			return err
		}
		r := st.Services[req.Name]
		if r == nil {
			r = &record{Order: nextOrder(st)}
			st.Services[req.Name] = r
		}
		r.Name, r.Command, r.Cwd = req.Name, req.Command, req.Cwd
		r.PID, r.PGID, r.StartTime = pid, pid, msg.StartTime
		r.MonitorPID, r.MonitorStartTime = cmd.Process.Pid, msg.MonitorStartTime
		r.Instance = id
		r.Status = apitype.StatusRunning
		r.StartedAt = now.UnixMilli()
		r.LogFile = spec.LogPath
		r.Ready = req.Readiness == nil
		r.Restarts, r.Consecutive = restarts, consecutive
		r.NextRestartAt, r.StoppedAt, r.Reason, r.StopRequested = nil, nil, "", ""
		r.Restart, r.MaxRestarts, r.Readiness, r.Env = req.Restart, req.MaxRestarts, req.Readiness, req.Env
		r.StopSignal, r.StopTimeoutMs = req.StopSignal, req.StopTimeoutMs
		info = r.ServiceInfo
		return nil
	})
	if err != nil {
		// Unrecorded, it would be an orphan: take it down again.
		return abort(err)
	}
	// A monitor that died since it reported the start (the service may kill
	// it) misses the ack; watch notices and stops what is left of the run.
	_, aerr := sw.Write([]byte(`{"type":"` + msgAck + `"}` + "\n"))
	sw.Close()
	if aerr != nil {
		m.log.Warn("monitor gone before the ack", "service", req.Name, "instance", id, "err", aerr)
	}
	ictx, icancel := context.WithCancel(m.ctx)
	in := &instance{
		name: req.Name, id: id, req: req, startedAt: now, logOffset: msg.LogOffset,
		t:   t,
		cmd: cmd, status: pr, br: br,
		ctx: ictx, cancel: icancel,
		exited: make(chan struct{}), gone: make(chan struct{}),
	}
	m.setCurrent(in)
	m.emit(apitype.Event{Type: apitype.EventStarted, Service: req.Name})
	if info.Ready {
		m.emit(apitype.Event{Type: apitype.EventReady, Service: req.Name})
	}
	m.wg.Add(1)
	go m.watch(in)
	if req.Readiness != nil {
		m.wg.Add(1)
		go m.probe(in)
	}
	m.log.Info("service started", "service", req.Name, "pid", pid, "instance", id, "restarts", restarts)
	return info, nil
}

func nextOrder(st *stateFile) int64 {
	var n int64
	for _, r := range st.Services {
		n = max(n, r.Order)
	}
	return n + 1
}

func (m *Manager) exitFile(instance string) string {
	return filepath.Join(m.runDir, instance+".exit")
}

// serviceEnv is the sidecar's environment plus FORCE_COLOR=1, the request's
// env and the service markers.
func (m *Manager) serviceEnv(req apitype.StartServiceRequest, id string) []string {
	drop := map[string]bool{"FORCE_COLOR": true}
	for k := range req.Env {
		drop[k] = true
	}
	env := filterEnv(m.cfg.Environ, drop)
	env = append(env, "FORCE_COLOR=1")
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		env = append(env, k+"="+req.Env[k])
	}
	return append(env, ServiceEnv+"="+req.Name, instanceEnv+"="+id)
}

// filterEnv drops the internal and per-service variables and the keys in drop.
func filterEnv(env []string, drop map[string]bool) []string {
	out := make([]string, 0, len(env)+6)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == internalEnv, k == ServiceEnv, k == instanceEnv, k == monitorEnv, drop[k]:
			continue
		}
		out = append(out, kv)
	}
	return out
}

// newInstanceID returns a fresh instance id: the state dir's prefix, a dash
// and 24 random hex digits.
func (m *Manager) newInstanceID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return m.prefix + "-" + hex.EncodeToString(b[:])
}
