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
	"github.com/proliferate-ai/sandbox-mcp/internal/procfs"
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
	req := sp.StartServiceRequest
	id := m.newInstanceID()
	now := m.now()
	sig, grace := sp.stopSettings(m.cfg.StopTimeout)
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
			if st, serr := procfs.ReadStat(t.monitor); serr == nil {
				t.monStart = st.Start
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
		if err := admit(st, sp); err != nil {
			return err
		}
		r := st.Services[req.Name]
		if r == nil {
			r = &record{Order: nextOrder(st)}
			st.Services[req.Name] = r
		}
		r.setSpec(sp)
		r.PID, r.PGID, r.StartTime = pid, pid, msg.StartTime
		r.MonitorPID, r.MonitorStartTime = cmd.Process.Pid, msg.MonitorStartTime
		r.Instance = id
		r.Status = apitype.StatusRunning
		r.StartedAt = now.UnixMilli()
		r.LogFile = spec.LogPath
		r.Ready = req.Readiness == nil
		r.Restarts, r.Consecutive = restarts, consecutive
		r.NextRestartAt, r.StoppedAt, r.Reason, r.StopRequested = nil, nil, "", ""
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
	in := m.newInstance(req.Name, id, sp, t, now)
	in.logOffset = msg.LogOffset
	in.cmd, in.status, in.br = cmd, pr, br
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
