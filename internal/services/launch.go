package services

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// Start starts req.Name, stopping a running service of that name first.
// Validation errors match ErrInvalid and carry the caller's message; a new
// name past the service cap or the state budget matches ErrConflict.
func (m *Manager) Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	sp, err := m.parse(req)
	if err != nil {
		return apitype.ServiceInfo{}, err
	}
	if err := checkCwd(sp.Cwd); err != nil {
		return apitype.ServiceInfo{}, err
	}
	if err := m.checkStart(sp); err != nil {
		return apitype.ServiceInfo{}, err
	}
	defer m.lockName(sp.Name)()
	if err := m.stopLocked(ctx, sp.Name); err != nil && !errors.Is(err, ErrNotFound) {
		return apitype.ServiceInfo{}, err
	}
	return m.launch(ctx, sp, 0, 0)
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
	sp, err := r.respawnSpec()
	if err != nil {
		return apitype.ServiceInfo{}, err
	}
	if err := checkCwd(sp.Cwd); err != nil {
		return apitype.ServiceInfo{}, err
	}
	if err := m.stopLocked(ctx, name); err != nil {
		return apitype.ServiceInfo{}, err
	}
	return m.launch(ctx, sp, 0, 0)
}

// launch starts a monitor running sp and records the new run. The record
// comes first: the monitor keeps the service only once it is acknowledged as
// written to disk, and stops it when the ack does not come (this process
// killed, disk full), so no run is ever left that no record names.
func (m *Manager) launch(ctx context.Context, sp spec, restarts, consecutive int) (apitype.ServiceInfo, error) {
	name := sp.Name
	id := m.newInstanceID()
	now := m.now()
	ms := m.monitorSpec(sp, id, now)
	fail := func(err error) (apitype.ServiceInfo, error) {
		return apitype.ServiceInfo{}, fmt.Errorf("start service %q: %w", name, err)
	}
	specJSON, err := json.Marshal(ms)
	if err != nil {
		return fail(err)
	}
	// Shared with other launches; the start-up orphan sweep takes it
	// exclusively, so it never takes a run being launched for an orphan.
	unlockLaunch, err := m.lockLaunch(false)
	if err != nil {
		return fail(err)
	}
	defer unlockLaunch()
	l, err := m.startMonitor(name, id)
	if err != nil {
		return fail(err)
	}
	msg, err := l.handshake(specJSON)
	if err != nil {
		l.abort(m.exitFile(id))
		return fail(err)
	}
	l.t = target{pgid: msg.PID, pgidStart: msg.StartTime, instance: id, monitor: l.cmd.Process.Pid, monStart: msg.MonitorStartTime}
	info, err := m.recordRun(sp, l, msg, now, restarts, consecutive, ms.LogPath)
	if err != nil {
		// Unrecorded, it would be an orphan: take it down again.
		l.abort(m.exitFile(id))
		return fail(err)
	}
	m.ackAndWatch(sp, l, msg, info, now)
	m.log.Info("service started", "service", name, "pid", msg.PID, "instance", id, "restarts", restarts)
	return info, nil
}

// monitorSpec is what the monitor of instance id of sp is told to run.
func (m *Manager) monitorSpec(sp spec, id string, now time.Time) monitorSpec {
	req := sp.StartServiceRequest
	sig, grace := sp.stopSettings(m.cfg.StopTimeout)
	return monitorSpec{
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
}

// monitorLaunch is a monitor being launched and this process's ends of its
// two pipes.
type monitorLaunch struct {
	cmd *exec.Cmd
	// status is the monitor's status pipe (its fd 3); br reads it once the
	// handshake began.
	status *os.File
	br     *bufio.Reader
	// stdin carries the spec and then the ack.
	stdin *os.File
	// t is what abort takes down; it names the service's group once the
	// monitor reported the start.
	t target
}

// startMonitor starts the monitor of instance id of service name, which then
// waits for its spec on stdin.
func (m *Manager) startMonitor(name, id string) (*monitorLaunch, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// The spec goes to the monitor's stdin: it holds the whole environment
	// and the command, more than the kernel allows one variable (128 KiB).
	// The ack follows on the same pipe.
	sr, sw, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	cmd := &exec.Cmd{Path: m.cfg.Executable, Args: []string{monitorName, name}}
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
		return nil, fmt.Errorf("start monitor: %w", err)
	}
	pw.Close()
	sr.Close()
	return &monitorLaunch{cmd: cmd, status: pr, stdin: sw, t: target{instance: id, monitor: cmd.Process.Pid}}, nil
}

// handshake sends the spec and reads the monitor's report of the start.
// A monitor that cannot take the spec reports it on the status pipe.
func (l *monitorLaunch) handshake(specJSON []byte) (monitorMsg, error) {
	_ = l.stdin.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := l.stdin.Write(append(specJSON, '\n')); err != nil {
		return monitorMsg{}, fmt.Errorf("send spec to monitor: %w", err)
	}
	l.br = bufio.NewReader(l.status)
	_ = l.status.SetReadDeadline(time.Now().Add(30 * time.Second))
	msg, err := readMonitorMsg(l.br)
	_ = l.status.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return msg, fmt.Errorf("monitor ended before reporting the start (the service may have killed it): %w", err)
	case msg.Type == msgError:
		return msg, errors.New(msg.Message)
	case msg.Type != msgStarted || msg.PID <= 1:
		return msg, fmt.Errorf("monitor sent %q instead of %q", msg.Type, msgStarted)
	}
	return msg, nil
}

// abort takes down whatever of the run exists: the monitor's descendants
// and every process carrying the instance marker, then the monitor. It
// removes the run's exit file, which no record will name.
func (l *monitorLaunch) abort(exitFile string) {
	l.stdin.Close()
	t := l.t
	if t.monStart == 0 {
		if st, err := procfs.ReadStat(t.monitor); err == nil {
			t.monStart = st.Start
		}
	}
	_ = killTree(context.Background(), t, syscall.SIGKILL, 0)
	_ = l.cmd.Process.Kill()
	_ = l.cmd.Wait()
	t.monitor, t.monStart = 0, 0
	_ = killTree(context.Background(), t, syscall.SIGKILL, 0)
	l.status.Close()
	os.Remove(exitFile)
}

// recordRun writes the run the monitor reported to the durable state and
// returns the service as recorded.
func (m *Manager) recordRun(sp spec, l *monitorLaunch, msg monitorMsg, now time.Time, restarts, consecutive int, logPath string) (apitype.ServiceInfo, error) {
	var info apitype.ServiceInfo
	err := m.updateDurable(func(st *stateFile) error {
		if err := admit(st, sp); err != nil {
			return err
		}
		r := st.Services[sp.Name]
		if r == nil {
			r = &record{Order: nextOrder(st)}
			st.Services[sp.Name] = r
		}
		r.setSpec(sp)
		r.PID, r.PGID, r.StartTime = msg.PID, msg.PID, msg.StartTime
		r.MonitorPID, r.MonitorStartTime = l.cmd.Process.Pid, msg.MonitorStartTime
		r.Instance = l.t.instance
		r.Status = apitype.StatusRunning
		r.StartedAt = now.UnixMilli()
		r.LogFile = logPath
		r.Ready = sp.Readiness == nil
		r.Restarts, r.Consecutive = restarts, consecutive
		r.NextRestartAt, r.StoppedAt, r.Reason, r.StopRequested, r.RestartClaimed = nil, nil, "", "", ""
		info = r.ServiceInfo
		return nil
	})
	return info, err
}

// ackAndWatch tells the monitor its run is recorded, makes the run the
// service's current instance and starts watching (and probing) it.
func (m *Manager) ackAndWatch(sp spec, l *monitorLaunch, msg monitorMsg, info apitype.ServiceInfo, now time.Time) {
	id := l.t.instance
	// A monitor that died since it reported the start (the service may kill
	// it) misses the ack; watch notices and stops what is left of the run.
	_, aerr := l.stdin.Write([]byte(`{"type":"` + msgAck + `"}` + "\n"))
	l.stdin.Close()
	if aerr != nil {
		m.log.Warn("monitor gone before the ack", "service", sp.Name, "instance", id, "err", aerr)
	}
	in := m.newInstance(sp.Name, id, sp, l.t, now)
	in.logOffset = msg.LogOffset
	in.cmd, in.status, in.br = l.cmd, l.status, l.br
	m.setCurrent(in)
	m.emit(apitype.Event{Type: apitype.EventStarted, Service: sp.Name})
	if info.Ready {
		m.emit(apitype.Event{Type: apitype.EventReady, Service: sp.Name})
	}
	m.wg.Add(1)
	go m.watch(in)
	if sp.Readiness != nil {
		m.wg.Add(1)
		go m.probe(in)
	}
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
