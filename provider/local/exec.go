package local

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/netns"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// environ is the environment of an exec: defaults, the spec's env, then the request's.
func (e *Engine) environ(st state.Record, extra []string) []string {
	m := map[string]string{"PATH": sandboxPATH, "HOME": rules.HomeDir, "USER": "root", "LANG": "C.UTF-8",
		"HOSTNAME": st.ID}
	if !st.Isolated {
		m["PATH"] = os.Getenv("PATH")
		m["HOME"] = filepath.Join(e.sandboxDir(st.ID), dirHome)
	}
	var keys []string
	var imageEnv []string
	if st.Image != nil {
		imageEnv = st.Image.Env
	}
	for _, list := range [][]string{imageEnv, st.Spec.Env, st.SecretEnv, extra} {
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			if k != "" {
				m[k] = v
			}
		}
	}
	if st.Spec.Egress && st.NetNS {
		for k, v := range netns.ProxyEnv() {
			if _, set := m[k]; !set {
				m[k] = v
			}
		}
	}
	if len(st.SecretEnv) > 0 {
		// The bound system bundle holds the authority: one file for every variable.
		for _, kv := range rules.TrustEnvAt(rules.TrustBundleFile, rules.TrustBundleFile) {
			k, v, _ := strings.Cut(kv, "=")
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
//
// For a sandbox with its own network, the connection's socket is made in that
// namespace (a unix socket's accepted end belongs to the connecting socket's
// namespace): no socket of the host's network is ever open inside.
func (e *Engine) dialControl(ctx context.Context, st state.Record) (net.Conn, error) {
	fd, err := unix.Open(e.sandboxDir(st.ID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	p := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + fileCtl
	var d net.Dialer
	if !st.Isolated || !st.NetNS {
		return d.DialContext(ctx, "unix", p)
	}
	nsfd, err := unix.Open("/proc/"+strconv.Itoa(st.Pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(nsfd)
	var c net.Conn
	err = netns.Do(nsfd, func() error {
		var err error
		c, err = d.DialContext(ctx, "unix", p)
		return err
	})
	return c, err
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
	conn, err := e.dialControl(ctx, st)
	if err != nil {
		return -1, 0, fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	cr := e.ctlRequest(st, req, detach)
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

// ctlRequest is the control request of an exec: the default working directory (the
// image's, or the home) and the sandbox's environment filled in.
func (e *Engine) ctlRequest(st state.Record, req engine.ExecRequest, detach bool) ctlRequest {
	cwd := req.Cwd
	if cwd == "" && st.Image != nil && st.Image.WorkDir != "" {
		cwd = st.Image.WorkDir
	}
	if cwd == "" {
		cwd = rules.HomeDir
		if !st.Isolated {
			cwd = filepath.Join(e.sandboxDir(st.ID), dirHome)
		}
	}
	cr := ctlRequest{Op: "exec", Argv: req.Argv, Cwd: cwd, Env: e.environ(st, req.Env),
		TimeoutMs: req.Timeout.Milliseconds(), Detach: detach, Stdin: req.Stdin != nil && !detach,
		TTY: req.TTY && !detach, Cols: req.Size.Cols, Rows: req.Size.Rows}
	if req.Timeout > 0 && cr.TimeoutMs == 0 {
		cr.TimeoutMs = 1
	}
	return cr
}
