package services

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// subscriber is one receiver of events.
type subscriber struct {
	ch   chan apitype.Event
	once sync.Once
}

func (s *subscriber) close() { s.once.Do(func() { close(s.ch) }) }

// Subscribe returns a channel of service events and a function that
// unsubscribes. The channel is buffered; a subscriber that falls behind
// misses events, it never blocks the manager. The channel is closed on
// unsubscribe and on Close.
func (m *Manager) Subscribe() (<-chan apitype.Event, func()) {
	s := &subscriber{ch: make(chan apitype.Event, m.cfg.EventBuffer)}
	m.subMu.Lock()
	if m.ctx.Err() != nil {
		s.close()
	} else {
		m.subs[s] = struct{}{}
	}
	m.subMu.Unlock()
	return s.ch, func() {
		m.subMu.Lock()
		delete(m.subs, s)
		m.subMu.Unlock()
		s.close()
	}
}

func (m *Manager) emit(ev apitype.Event) {
	if ev.Time == 0 {
		ev.Time = m.now().UnixMilli()
	}
	m.subMu.Lock()
	defer m.subMu.Unlock()
	for s := range m.subs {
		select {
		case s.ch <- ev:
		default:
		}
	}
}

// watch follows one run from start to its end, then applies the restart policy.
func (m *Manager) watch(in *instance) {
	defer m.wg.Done()
	code, known, monitorDied, ok := m.waitExit(in)
	if !ok {
		return
	}
	if monitorDied {
		// Nothing reaps, logs or cleans up after the run any more: stop all
		// of it before its exit is recorded, so a restart never runs next to
		// what is left of it.
		reason := "the service's monitor died; stopped what was left of the run"
		in.failReason.CompareAndSwap(nil, &reason)
		t := in.t
		t.monitor, t.monStart = 0, 0
		sig, grace := m.stopSettings(&record{ServiceInfo: apitype.ServiceInfo{StopSignal: in.req.StopSignal, StopTimeoutMs: in.req.StopTimeoutMs}})
		if in.stopping.Load() {
			sig, grace = syscall.SIGKILL, 0
		}
		if err := killTree(context.WithoutCancel(in.ctx), t, sig, grace); err != nil {
			m.log.Error("stop the run of a dead monitor", "service", in.name, "err", err)
		}
		m.log.Warn("service monitor died; stopped the run", "service", in.name, "instance", in.id)
	}
	close(in.exited)
	claimed := m.recordExit(in, code, known)
	if !m.waitGone(in) {
		return
	}
	close(in.gone)
	os.Remove(m.exitFile(in.id))
	if claimed {
		m.afterExit(in, code, known)
	}
}

// waitExit returns the main process's exit code; ok is false when the
// manager closes first. monitorDied is true when the monitor ended without
// reporting the exit (killed), whatever of the run may still be running.
func (m *Manager) waitExit(in *instance) (code int, known, monitorDied, ok bool) {
	if in.status != nil {
		for {
			msg, err := readMonitorMsg(in.br)
			if err != nil {
				in.status.Close()
				if m.ctx.Err() != nil {
					return 0, false, false, false
				}
				code, known := m.readExitFile(in.id)
				return code, known, !known, true
			}
			if msg.Type == msgExited && msg.Code != nil {
				in.status.Close() // the monitor has nothing more to say
				return *msg.Code, true, false, true
			}
		}
	}
	tick := time.NewTicker(m.cfg.PollInterval)
	defer tick.Stop()
	for {
		if code, known := m.readExitFile(in.id); known {
			return code, true, false, true
		}
		// A record without a monitor (written by an older sidecar) ends with its process.
		legacy := in.t.monitor == 0
		if !alive(in.t.monitor, in.t.monStart) && (!legacy || !alive(in.t.pgid, in.t.pgidStart)) {
			code, known := m.readExitFile(in.id)
			return code, known, !known && !legacy, true
		}
		select {
		case <-m.ctx.Done():
			return 0, false, false, false
		case <-tick.C:
		}
	}
}

// waitGone waits for the monitor to end, reaping it when it is our child.
func (m *Manager) waitGone(in *instance) bool {
	delay := 5 * time.Millisecond
	maxDelay := m.cfg.PollInterval
	if in.cmd != nil {
		maxDelay = 50 * time.Millisecond
	}
	for {
		if in.cmd != nil {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(in.cmd.Process.Pid, &ws, syscall.WNOHANG, nil)
			if pid == in.cmd.Process.Pid || errors.Is(err, syscall.ECHILD) {
				_ = in.cmd.Process.Release()
				return true
			}
		} else if !alive(in.t.monitor, in.t.monStart) {
			return true
		}
		select {
		case <-m.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(delay*2, maxDelay)
	}
}

func (m *Manager) readExitFile(id string) (int, bool) {
	b, err := os.ReadFile(m.exitFile(id))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return code, err == nil
}

// recordExit writes the exit of in into the state and emits "exited". It
// reports whether this process claimed the exit (and so owns the restart).
func (m *Manager) recordExit(in *instance, code int, known bool) bool {
	claimed := false
	now := m.now()
	_ = m.update(func(st *stateFile) error {
		r := st.Services[in.name]
		if r == nil || r.Instance != in.id || r.ExitedInstance == in.id {
			return nil
		}
		r.ExitedInstance = in.id
		if r.StopRequested == in.id || in.stopping.Load() {
			return nil
		}
		claimed = true
		applyExit(r, code, known, in.failReason.Load(), now)
		return nil
	})
	if claimed {
		ev := apitype.Event{Type: apitype.EventExited, Service: in.name}
		if known {
			ev.ExitCode = &code
		}
		if p := in.failReason.Load(); p != nil {
			ev.Reason = *p
		}
		m.emit(ev)
		m.log.Info("service exited", "service", in.name, "exit_code", code, "known", known)
	}
	return claimed
}

// applyExit sets the status of r after its main process ended: stopped on
// exit 0, error otherwise or when a readiness probe failed.
func applyExit(r *record, code int, known bool, reason *string, now time.Time) {
	at := now.UnixMilli()
	r.LastExitAt = &at
	r.Ready = false
	r.Status = apitype.StatusStopped
	r.ExitCode = nil
	if known {
		c := code
		r.ExitCode = &c
		if code != 0 {
			r.Status = apitype.StatusError
		}
	} else {
		r.Reason = "exited while no sidecar was watching; exit code unknown"
	}
	if reason != nil {
		r.Reason = *reason
		r.Status = apitype.StatusError
	}
}

// decide applies the restart policy of r to an exit.
func (m *Manager) decide(r *record, code int, known bool, ranFor time.Duration) (delay time.Duration, restart bool, giveUp string) {
	switch r.Restart {
	case apitype.RestartAlways:
	case apitype.RestartOnFailure:
		if known && code == 0 && r.Reason == "" {
			return 0, false, ""
		}
	default:
		return 0, false, ""
	}
	limit := 5
	if r.MaxRestarts != nil {
		limit = *r.MaxRestarts
	}
	n := r.Consecutive
	if ranFor >= m.cfg.BackoffReset {
		n = 0
	}
	if n >= limit {
		return 0, false, fmt.Sprintf("gave up after %d restarts", n)
	}
	delay = m.cfg.BackoffBase
	for i := 0; i < n && delay < m.cfg.BackoffMax; i++ {
		delay *= 2
	}
	return min(delay, m.cfg.BackoffMax), true, ""
}

// afterExit schedules a restart when the policy asks for one.
func (m *Manager) afterExit(in *instance, code int, known bool) {
	unlock := m.lockName(in.name)
	if m.current(in.name) != in || in.stopping.Load() {
		unlock()
		return
	}
	now := m.now()
	var delay time.Duration
	var restart bool
	var at int64
	_ = m.update(func(st *stateFile) error {
		r := st.Services[in.name]
		if r == nil || r.Instance != in.id || r.StopRequested == in.id {
			return nil
		}
		var giveUp string
		delay, restart, giveUp = m.decide(r, code, known, now.Sub(in.startedAt))
		if giveUp != "" {
			r.Status = apitype.StatusError
			if r.Reason != "" {
				r.Reason += "; "
			}
			r.Reason += giveUp
		}
		if !restart {
			return nil
		}
		if now.Sub(in.startedAt) >= m.cfg.BackoffReset {
			r.Consecutive = 0
		}
		r.Consecutive++
		r.Restarts++
		at = now.Add(delay).UnixMilli()
		r.NextRestartAt = &at
		r.Status = apitype.StatusError
		return nil
	})
	unlock()
	if !restart {
		return
	}
	m.emit(apitype.Event{Type: apitype.EventRestarting, Service: in.name, Time: now.UnixMilli(), NextRestartAt: &at})
	m.log.Info("service restarting", "service", in.name, "delay", delay)
	m.relaunchAfter(in, delay)
}

// relaunchAfter starts the run's service again after delay unless it is stopped first.
func (m *Manager) relaunchAfter(in *instance, delay time.Duration) {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-in.ctx.Done():
		return
	case <-m.ctx.Done():
		return
	}
	defer m.lockName(in.name)()
	if m.current(in.name) != in || in.stopping.Load() {
		return
	}
	// Claim the restart under the state lock: another process sharing the
	// state may have scheduled the same one.
	var r record
	claimed := false
	_ = m.update(func(st *stateFile) error {
		x := st.Services[in.name]
		if x != nil && x.Instance == in.id && x.NextRestartAt != nil && x.StopRequested != in.id {
			x.NextRestartAt = nil
			r, claimed = *x, true
		}
		return nil
	})
	if !claimed {
		return
	}
	req, err := m.normalize(requestOf(&r))
	if err == nil {
		_, err = m.launch(m.ctx, req, r.Restarts, r.Consecutive)
	}
	if err != nil {
		m.log.Warn("restart service", "service", in.name, "err", err)
		msg := err.Error()
		_ = m.update(func(st *stateFile) error {
			if x := st.Services[in.name]; x != nil && x.Instance == in.id {
				x.Status = apitype.StatusError
				x.Reason = "restart: " + msg
			}
			return nil
		})
	}
}

// probe waits for the readiness condition of in, and fails the run when it
// does not hold within the timeout.
func (m *Manager) probe(in *instance) {
	defer m.wg.Done()
	rd := in.req.Readiness
	timeout := m.cfg.ReadinessTimeout
	if rd.TimeoutMs > 0 {
		timeout = time.Duration(rd.TimeoutMs) * time.Millisecond
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var check func() error
	switch {
	case rd.TCP != nil:
		check = ownTCPCheck(in, *rd.TCP)
	case rd.HTTP != "":
		client := &http.Client{
			Timeout:       time.Second,
			Transport:     &http.Transport{DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		defer client.CloseIdleConnections()
		check = ownHTTPCheck(in, rd.HTTP, func() error { return checkHTTP(in.ctx, client, rd.HTTP) })
	default:
		re := regexp.MustCompile(rd.Log)
		lp := &logProbe{path: filepath.Join(m.logDir, in.name+".log"), offset: in.logOffset}
		check = func() error { return lp.check(re) }
	}
	for {
		err := check()
		if err == nil {
			m.markReady(in)
			return
		}
		select {
		case <-in.ctx.Done():
			return
		case <-in.exited:
			return
		case <-deadline.C:
			reason := fmt.Sprintf("not ready after %d ms: %v", timeout.Milliseconds(), err)
			in.failReason.Store(&reason)
			m.log.Warn("service not ready", "service", in.name, "reason", reason)
			sig, grace := m.stopSettings(&record{ServiceInfo: apitype.ServiceInfo{StopSignal: in.req.StopSignal, StopTimeoutMs: in.req.StopTimeoutMs}})
			_ = killTree(in.ctx, in.t, sig, grace)
			return
		case <-tick.C:
		}
	}
}

func (m *Manager) markReady(in *instance) {
	changed := false
	_ = m.update(func(st *stateFile) error {
		r := st.Services[in.name]
		if r != nil && r.Instance == in.id && r.Status == apitype.StatusRunning && !r.Ready {
			r.Ready = true
			changed = true
		}
		return nil
	})
	if changed {
		m.emit(apitype.Event{Type: apitype.EventReady, Service: in.name})
	}
}

func checkTCP(port int) error {
	var err error
	for _, host := range []string{"127.0.0.1", "::1"} {
		var c net.Conn
		c, err = net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("nothing accepts connections on port %d", port)
}

func checkHTTP(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// logProbe matches a regular expression against what a run wrote to its log.
type logProbe struct {
	path   string
	offset int64
	buf    []byte
}

const logProbeMax = 1 << 20

func (p *logProbe) check(re *regexp.Regexp) error {
	f, err := os.Open(p.path)
	if err == nil {
		if fi, serr := f.Stat(); serr == nil && fi.Size() < p.offset {
			p.offset = 0 // rotated
		}
		b := make([]byte, 64<<10)
		for {
			n, rerr := f.ReadAt(b, p.offset)
			p.buf = append(p.buf, b[:n]...)
			p.offset += int64(n)
			if rerr != nil || n == 0 {
				break
			}
		}
		f.Close()
		if len(p.buf) > logProbeMax {
			p.buf = p.buf[len(p.buf)-logProbeMax:]
		}
	}
	if re.Match(p.buf) {
		return nil
	}
	return fmt.Errorf("log has no match for %q", re.String())
}

// adopt takes over the runs recorded in the state file: live ones are
// watched again, ended ones get their exit recorded, pending restarts are scheduled.
func (m *Manager) adopt() error {
	type pending struct {
		in     *instance
		delay  time.Duration
		code   int
		known  bool
		exited bool
	}
	var watch []*instance
	var restarts []pending
	now := m.now()
	err := m.update(func(st *stateFile) error {
		for name, r := range st.Services {
			waiting := r.Status == apitype.StatusError && r.NextRestartAt != nil
			if r.Status != apitype.StatusRunning && !waiting {
				continue
			}
			if r.StartTime == 0 && r.PID > 0 && legacyMatch(r.PID, r.Command) {
				if st, err := readStat(r.PID); err == nil {
					r.StartTime = st.start
					if st.pgid == r.PID {
						r.PGID = r.PID
					}
				}
			}
			ictx, icancel := context.WithCancel(m.ctx)
			in := &instance{
				name: name, id: r.Instance, req: requestOf(r), t: r.target(),
				startedAt: time.UnixMilli(r.StartedAt),
				ctx:       ictx, cancel: icancel,
				exited: make(chan struct{}), gone: make(chan struct{}),
			}
			if waiting {
				close(in.exited)
				close(in.gone)
				restarts = append(restarts, pending{in: in, delay: time.UnixMilli(*r.NextRestartAt).Sub(now)})
				continue
			}
			if alive(r.MonitorPID, r.MonitorStartTime) || alive(r.PID, r.StartTime) {
				watch = append(watch, in)
				continue
			}
			code, known := m.readExitFile(r.Instance)
			if r.Instance == "" || r.ExitedInstance == r.Instance {
				known = false
			}
			r.ExitedInstance = r.Instance
			applyExit(r, code, known, nil, now)
			close(in.exited)
			close(in.gone)
			restarts = append(restarts, pending{in: in, code: code, known: known, exited: true})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("services: load state: %w", err)
	}
	for _, in := range watch {
		m.setCurrent(in)
		m.log.Info("service re-adopted", "service", in.name, "pid", in.t.pgid)
		m.wg.Add(1)
		go m.watch(in)
	}
	for _, p := range restarts {
		m.setCurrent(p.in)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if p.exited {
				m.afterExit(p.in, p.code, p.known)
				return
			}
			m.relaunchAfter(p.in, max(p.delay, 0))
		}()
	}
	return nil
}

// legacyMatch reports whether pid runs `bash -c command`: the check for a
// state entry written without a start time.
func legacyMatch(pid int, command string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	return len(args) == 3 && filepath.Base(args[0]) == "bash" && args[1] == "-c" && args[2] == command
}

// syncLoop follows runs started by other processes sharing the state dir
// (the MCP mode and the API server), so their exits are recorded and their
// restart policies applied even after the process that started them is gone.
func (m *Manager) syncLoop() {
	defer m.wg.Done()
	tick := time.NewTicker(m.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-tick.C:
		}
		m.flushPending()
		m.refresh()
		m.mu.RLock()
		var foreign []record
		for _, r := range m.st.Services {
			if r.Status == apitype.StatusRunning && r.Instance != "" && r.ExitedInstance != r.Instance {
				foreign = append(foreign, *r)
			}
		}
		m.mu.RUnlock()
		for _, r := range foreign {
			m.adoptForeign(r)
		}
	}
}

// adoptForeign watches r's run unless this process already does. A name
// being started or stopped here is skipped; the next round sees it again.
func (m *Manager) adoptForeign(r record) {
	m.namesMu.Lock()
	mu, ok := m.names[r.Name]
	if !ok {
		mu = &sync.Mutex{}
		m.names[r.Name] = mu
	}
	m.namesMu.Unlock()
	if !mu.TryLock() {
		return
	}
	defer mu.Unlock()
	if in := m.current(r.Name); in != nil && in.id == r.Instance {
		return
	}
	if !alive(r.MonitorPID, r.MonitorStartTime) && !alive(r.PID, r.StartTime) {
		if _, known := m.readExitFile(r.Instance); !known {
			return // not started yet or already handled elsewhere; adopt() covers restarts
		}
	}
	ictx, icancel := context.WithCancel(m.ctx)
	in := &instance{
		name: r.Name, id: r.Instance, req: requestOf(&r), t: r.target(),
		startedAt: time.UnixMilli(r.StartedAt),
		ctx:       ictx, cancel: icancel,
		exited: make(chan struct{}), gone: make(chan struct{}),
	}
	m.setCurrent(in)
	m.log.Info("service adopted from another process", "service", r.Name, "pid", r.PID)
	m.wg.Add(1)
	go m.watch(in)
}
