package local

// The shim's steps of a start: the secrets, the bundle, the runtime's create and
// init's configuration (shim.go's start runs them in order).

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/oci"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/rootfs"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
)

// refuseSecrets is the error of a sandbox st that cannot carry spec.Secrets, before
// anything is made: only the shim's egress proxy can put a secret's value in place of
// its placeholder, and a secret is never degraded to an environment variable.
func refuseSecrets(spec engine.Spec, st state.Record) error {
	switch {
	case len(spec.Secrets) == 0:
		return nil
	case !st.Isolated:
		return fmt.Errorf("Spec.Secrets: an unisolated sandbox (EngineOptions.Unisolated) runs on the host's network, with no egress proxy to add %s's value on the way out; use an isolated engine: %w",
			spec.Secrets[0].Name, engine.ErrUnsupported)
	case !(spec.Egress && st.NetNS):
		return fmt.Errorf("Spec.Secrets: they need the engine's egress proxy (Spec.Egress, without Spec.Network): %w", engine.ErrUnsupported)
	}
	return nil
}

// loadSecrets makes the sandbox's secrets from the values the engine sent over the
// shim's pipe: their placeholders and the certificate init adds to the sandbox's trust.
func (s *shim) loadSecrets() error {
	if len(s.cfg.Secrets) == 0 {
		return nil
	}
	list := make([]engine.Secret, len(s.cfg.Secrets))
	for i, x := range s.cfg.Secrets {
		list[i] = engine.Secret{Name: x.Name, Value: x.Value, Hosts: x.Hosts}
	}
	var err error
	if s.secrets, err = egress.NewSecrets(list); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	s.cfg.Init.TrustPEM = s.secrets.TrustPEM()
	return nil
}

// writeBundle builds the sandbox's root under the shim's private mount base, binds
// the init binary beside it and writes the OCI bundle; it returns the bundle's path.
func (s *shim) writeBundle() (string, error) {
	if err := os.MkdirAll(shimMountBase, 0o711); err != nil {
		return "", err
	}
	if err := unix.Mount("tmpfs", shimMountBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711,size=64k"); err != nil {
		return "", fmt.Errorf("mount %s: %w", shimMountBase, err)
	}
	root, initBin := filepath.Join(shimMountBase, "root"), filepath.Join(shimMountBase, "init")
	if err := os.WriteFile(initBin, nil, 0o755); err != nil {
		return "", err
	}
	if err := unix.Mount(s.cfg.InitBinary, initBin, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind the init binary: %w", err)
	}
	userns, closeNS, err := sandboxUserns()
	if err != nil {
		return "", err
	}
	defer closeNS()
	ro, err := rootfs.Build(s.cfg.Init.Config, root, userns)
	if err != nil {
		return "", fmt.Errorf("set up the sandbox root: %w", err)
	}
	return oci.WriteBundle(filepath.Join(s.dir, dirBundle), oci.Config{ID: s.id, Root: root, ReadOnly: ro,
		Init: initBin, Env: []string{initEnv + "=" + modeContainer, "PATH=" + sandboxPATH},
		NetNS: s.cfg.Init.NetNS, Limits: s.cfg.Limits, Cgroup: s.cfg.Cgroup})
}

// create runs the runtime's create on bundle, handing init readyW (closed here) and
// the read end of its configuration socket; it returns init's host pid and the
// socket's write end, which configure sends the configuration on.
func (s *shim) create(bundle string, readyW *os.File) (int, *os.File, error) {
	defer readyW.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	cfgR := os.NewFile(uintptr(pair[1]), "config")
	defer cfgR.Close()
	cfgW := os.NewFile(uintptr(pair[0]), "config")
	fail := func(err error) (int, *os.File, error) {
		cfgW.Close()
		return 0, nil, err
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, fileInitLg), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	// Init's output reaches the log through a pipe: no file of the host is open inside.
	outR, outW, err := os.Pipe()
	if err != nil {
		logf.Close()
		return fail(err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(logf, outR)
		outR.Close()
		logf.Close()
	}()
	cmd := s.runtimeCmd("create", "--bundle", bundle, "--pid-file", filepath.Join(s.dir, filePid),
		"--preserve-fds", "1", s.id)
	// Passed through to init: its stdin is the configuration, its output the log.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = cfgR, outW, outW
	cmd.ExtraFiles = []*os.File{readyW}
	err = cmd.Run()
	outW.Close()
	if err != nil {
		select { // the runtime's message, for the error
		case <-copied:
		case <-time.After(time.Second):
		}
		return fail(fmt.Errorf("%s create: %w: %s", filepath.Base(s.cfg.Runtime), err, logTail(filepath.Join(s.dir, fileInitLg))))
	}
	s.created = true
	pb, err := os.ReadFile(filepath.Join(s.dir, filePid))
	if err != nil {
		return fail(fmt.Errorf("read init's pid: %w", err))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil || pid <= 0 {
		return fail(fmt.Errorf("read init's pid: %q", pb))
	}
	return pid, cfgW, nil
}

// configure readies the created container's init: its OOM score, the sandbox's
// network namespace, and its configuration with the control socket, sent on cfgW
// (closed here).
func (s *shim) configure(pid int, cfgW *os.File) error {
	defer cfgW.Close()
	// Init is never the OOM victim; where even the host's root may not lower a score
	// (no CAP_SYS_RESOURCE), the commands' higher score still makes them the victims.
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(oci.InitOOMScoreAdj)), 0); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox shim: init's oom_score_adj: %v (the commands run at %d)\n", err, oci.CmdOOMScoreAdj)
	}
	if s.cfg.Init.NetNS {
		var err error
		if s.netns, err = unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("the sandbox's network namespace: %w", err)
		}
	}
	// The control socket belongs to the sandbox's network namespace: no socket of the
	// host's network is ever open inside.
	ctl, err := s.controlListener()
	if err != nil {
		return err
	}
	defer ctl.Close()
	if s.cfg.TimeoutMs > 0 {
		s.cfg.Init.DeadlineMs = time.Now().Add(time.Duration(s.cfg.TimeoutMs) * time.Millisecond).UnixMilli()
	}
	b, err := json.Marshal(s.cfg.Init)
	if err == nil {
		err = unix.Sendmsg(int(cfgW.Fd()), b, unix.UnixRights(int(ctl.Fd())), nil, 0)
	}
	if err != nil {
		return fmt.Errorf("configure init: %w", err)
	}
	return nil
}
