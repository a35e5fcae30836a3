package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/cgroup"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/rootfs"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/volume"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Create starts a sandbox and returns once its init serves exec.
func (e *Engine) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	id := newEngineID("sb-")
	sd := e.sandboxDir(id)
	bx := &box{st: state.Record{ID: id, Name: spec.Name, Created: time.Now().UTC(), Spec: spec,
		Isolated: !e.o.Unisolated, NetNS: !e.o.Unisolated && !spec.Network}}
	if err := refuseSecrets(spec, bx.st); err != nil {
		return engine.Info{}, fmt.Errorf("create sandbox: %w", err)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return engine.Info{}, errors.New("create sandbox: engine is closed")
	}
	if err := e.claimKind(); err != nil {
		e.mu.Unlock()
		return engine.Info{}, fmt.Errorf("create sandbox: %w", err)
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
	img, err := e.prepare(ctx, bx, sd)
	if err != nil {
		return engine.Info{}, err
	}
	cfg := initConfig{Config: rootfs.Config{ID: bx.st.ID, Dir: sd, Hide: []string{e.dir}},
		Isolated: bx.st.Isolated, NetNS: bx.st.NetNS}
	if img != nil {
		cfg.Layers = img.Layers
	}
	if spec.Timeout > 0 {
		cfg.DeadlineMs = time.Now().Add(spec.Timeout).UnixMilli()
	}
	if bx.st.Isolated {
		for _, b := range [][2]string{{e.o.SandboxMCP, SandboxMCPPath}, {e.o.Proliferate, ProliferatePath}} {
			if b[0] != "" {
				cfg.Binds = append(cfg.Binds, rootfs.Bind{Source: b[0], Target: b[1], ReadOnly: true})
			}
		}
		for _, m := range spec.Mounts {
			if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
				return engine.Info{}, fmt.Errorf("mount %s -> %s: paths must be absolute", m.Source, m.Target)
			}
			cfg.Binds = append(cfg.Binds, rootfs.Bind{Source: m.Source, Target: filepath.Clean(m.Target), ReadOnly: m.ReadOnly, Host: true})
		}
		vols, err := e.vols.Mount(spec.Volumes)
		if err != nil {
			return engine.Info{}, err
		}
		cfg.Binds = append(cfg.Binds, vols...)
	} else if len(spec.Mounts) > 0 || len(spec.Volumes) > 0 {
		return engine.Info{}, fmt.Errorf("mounts and volumes need an isolated sandbox: %w", engine.ErrUnsupported)
	}
	// The tunnels' host listeners are made here, on the host's network, and handed to
	// the shim (or an unisolated init), which serves them: they live exactly as long
	// as the sandbox.
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
	if !bx.st.Isolated {
		if err := e.startInit(ctx, bx, cfg, lns); err != nil {
			return engine.Info{}, err
		}
	} else {
		sc := shimConfig{Init: cfg, Runtime: e.runtime, RuntimeRoot: e.runtimeRoot(), InitBinary: e.initBinary,
			TimeoutMs: spec.Timeout.Milliseconds(),
			Limits:    bx.st.Applied, Cgroup: cgroup.Name(bx.st.ID)}
		if spec.Egress && bx.st.NetNS {
			if _, err := egress.NewPolicy(spec.EgressHosts); err != nil {
				return engine.Info{}, fmt.Errorf("egress: %w", err)
			}
			sc.Egress, sc.EgressHosts = true, spec.EgressHosts
			for _, x := range spec.Secrets {
				sc.Secrets = append(sc.Secrets, shimSecret{Name: x.Name, Value: x.Value, Hosts: x.Hosts})
			}
		}
		if err := e.startShim(ctx, bx, sc, lns); err != nil {
			return engine.Info{}, err
		}
	}
	if img != nil {
		// The production layout, where the image lacks it.
		for _, d := range []string{rules.WorkspaceDir, rules.HomeDir + "/.proliferate", rules.StateDir} {
			if err := e.MkdirAll(ctx, bx.st.ID, d); err != nil {
				return engine.Info{}, err
			}
		}
	}
	bx.mu.Lock()
	err = e.saveState(bx.st)
	bx.mu.Unlock()
	if err != nil {
		return engine.Info{}, err
	}
	return e.info(bx), nil
}

// startInit starts the init of an unisolated sandbox, a host process, and waits until
// it serves its control socket.
func (e *Engine) startInit(ctx context.Context, bx *box, cfg initConfig, tunnels []*os.File) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"sandbox-init"}
	cmd.Env = []string{initEnv + "=" + modeHostInit, "PATH=" + sandboxPATH}
	return e.startHelper(ctx, bx, cmd, b, tunnels, func(string) (int, error) { return cmd.Process.Pid, nil })
}

// startShim starts the sandbox's shim and waits until the sandbox's init serves its
// control socket; the shim answers "ok <init's pid>".
func (e *Engine) startShim(ctx context.Context, bx *box, sc shimConfig, tunnels []*os.File) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"sandbox-shim"}
	cmd.Env = []string{initEnv + "=" + modeShim}
	// A mount namespace of its own: the sandbox's root is mounted there only.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	return e.startHelper(ctx, bx, cmd, b, tunnels, func(rest string) (int, error) {
		p, env, _ := strings.Cut(rest, " ")
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("sandbox shim: bad answer %q", rest)
		}
		var placeholders []string
		if err := json.Unmarshal([]byte(env), &placeholders); err != nil {
			return 0, fmt.Errorf("sandbox shim: bad answer %q: %w", rest, err)
		}
		bx.mu.Lock()
		bx.st.SecretEnv = placeholders
		bx.mu.Unlock()
		return pid, nil
	})
}

// startHelper starts cmd (an unisolated init or a shim) with config on its fd 3, the
// ready pipe on fd 4 and the tunnels' listeners from fd 5 on, and waits for its
// "ok" line; initPid turns the rest of that line into the pid of the sandbox's init.
func (e *Engine) startHelper(ctx context.Context, bx *box, cmd *exec.Cmd, config []byte, tunnels []*os.File,
	initPid func(rest string) (int, error)) error {
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
	logf, err := os.OpenFile(filepath.Join(e.sandboxDir(bx.st.ID), fileInitLg), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		readyR.Close()
		readyW.Close()
		return err
	}
	defer logf.Close()
	cmd.ExtraFiles = append([]*os.File{cfgR, readyW}, tunnels...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	err = cmd.Start()
	cfgR.Close()
	readyW.Close()
	if err != nil {
		cfgW.Close()
		readyR.Close()
		return fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	start, _, _ := state.ProcStart(pid)
	bx.mu.Lock()
	bx.done = done
	bx.st.ShimPid, bx.st.ShimStart = pid, start
	if cmd.Args[0] == "sandbox-init" {
		bx.st.Pid, bx.st.PidStart = pid, start
		bx.st.ShimPid, bx.st.ShimStart = 0, 0
		// An unisolated init enters the sandbox's cgroups before it starts anything
		// (a container's are the runtime's to enter).
		e.cg.Enter(bx.st.Cgroups, pid)
	}
	bx.st.Dead = false
	// Saved at once: whoever finds the directory can end this process.
	err = e.saveState(bx.st)
	bx.st.Dead = true
	bx.mu.Unlock()
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		cfgW.Close()
		readyR.Close()
		return err
	}
	_, werr := cfgW.Write(config)
	cfgW.Close()
	if werr != nil {
		readyR.Close()
		return fmt.Errorf("configure %s: %w", cmd.Args[0], werr)
	}
	return e.awaitReady(ctx, bx, readyR, cmd.Args[0], pid, initPid)
}

// awaitReady reads the "ok" line of helper name (pid) from readyR (closed here) and
// records the pid of the sandbox's init that initPid makes of the rest of the line.
func (e *Engine) awaitReady(ctx context.Context, bx *box, readyR *os.File, name string, pid int,
	initPid func(rest string) (int, error)) error {
	defer readyR.Close()
	type answer struct {
		line string
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(readyR).ReadString('\n')
		ch <- answer{strings.TrimSpace(line), err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	rest, ok := strings.CutPrefix(a.line, "ok")
	if !ok {
		msg := strings.TrimPrefix(a.line, "error: ")
		if msg == "" {
			msg = fmt.Sprint(a.err)
		}
		return fmt.Errorf("%s: %s", name, msg)
	}
	ipid, err := initPid(strings.TrimSpace(rest))
	if err != nil {
		return err
	}
	istart, _, _ := state.ProcStart(ipid)
	pidns := ""
	if ipid != pid {
		pidns, _ = os.Readlink("/proc/" + strconv.Itoa(ipid) + "/ns/pid")
	}
	bx.mu.Lock()
	bx.st.Pid, bx.st.PidStart, bx.st.PidNS = ipid, istart, pidns
	bx.st.Dead = false
	bx.mu.Unlock()
	return nil
}

// destroy kills the sandbox's processes, closes its tunnels and removes its
// cgroups and directory.
func (e *Engine) destroy(bx *box) (err error) {
	bx.mu.Lock()
	bx.gone = true
	st := bx.st
	done := bx.done
	bx.mu.Unlock()
	defer func() {
		if err != nil { // still there: its state may be written again
			bx.mu.Lock()
			bx.gone = false
			bx.mu.Unlock()
		}
	}()
	if st.Paused || len(st.Cgroups) > 0 {
		e.cg.Thaw(st.Cgroups)
	}
	if st.Pid > 0 || st.ShimPid > 0 {
		if st.InitAlive() {
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
			// Something outlived the kill of init by its recorded pid: the runtime
			// ends the whole container.
			if derr := e.forceDelete(st); derr != nil {
				return fmt.Errorf("%w; %w", err, derr)
			}
			if err := waitGone(st, 5*time.Second); err != nil {
				return err
			}
		}
		// The shim deletes the container once init is gone; one that does not is
		// ended, and the container deleted here.
		if err := e.endShim(st, 5*time.Second); err != nil {
			return err
		}
	}
	e.cg.Remove(st.Cgroups)
	e.vols.Release(st.ID, st.Spec.Volumes)
	volume.UnmountDisk(e.sandboxDir(st.ID))
	if err := os.RemoveAll(e.sandboxDir(st.ID)); err != nil {
		return err
	}
	return nil
}

// forceDelete kills the sandbox's shim and has the runtime kill and delete its
// container, whatever is left of it.
func (e *Engine) forceDelete(st state.Record) error {
	if st.ShimPid > 0 && st.ShimAlive() {
		_ = syscall.Kill(st.ShimPid, syscall.SIGKILL)
	}
	if !st.Isolated || e.runtime == "" {
		return nil
	}
	cmd := exec.Command(e.runtime, "--root", e.runtimeRoot(), "delete", "--force", st.ID)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sandbox %s: delete its container: %v: %s", st.ID, err, bytes.TrimSpace(out))
	}
	return nil
}

// endShim waits for the sandbox's shim to exit, and, past timeout, kills it and deletes
// the container itself.
func (e *Engine) endShim(st state.Record, timeout time.Duration) error {
	if st.ShimPid <= 0 {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for st.ShimAlive() {
		if time.Now().After(deadline) {
			return e.forceDelete(st)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// waitGone waits until no process of the sandbox is left in /proc: init (by pid
// and start time) and, for an isolated sandbox, any process in its pid namespace.
func waitGone(st state.Record, timeout time.Duration) error {
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

// procLeft says whether a process of the sandbox is still in /proc: its init, or a
// process of its cgroups (init enters them before it starts anything), or, without
// cgroups, of its pid namespace. The cgroups come first because a namespace's inode
// number is free again once the namespace is gone, and another sandbox of the machine
// may get it: its processes are not this one's.
func procLeft(st state.Record) bool {
	if start, _, ok := state.ProcStart(st.Pid); ok && start == st.PidStart {
		return true
	}
	if len(st.Cgroups) > 0 {
		b, err := os.ReadFile(filepath.Join(st.Cgroups[0], "cgroup.procs"))
		return err == nil && len(bytes.TrimSpace(b)) > 0
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
			volume.UnmountDisk(sd)
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
