package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// bridgeScript connects to 127.0.0.1:$1 inside the sandbox and joins the connection
// to its own stdin and stdout: bash's /dev/tcp, which every image with bash has (no
// nc or socat needed). "connected" on stderr says the connect succeeded. Whichever
// side ends first (the server closes, or the caller closes stdin) ends both copies
// and the process.
const bridgeScript = `exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
echo connected >&2
cat <&3 & r=$!
cat <&0 >&3 & w=$!
wait -n
kill $r $w 2>/dev/null
exit 0`

// bridgeConnectTimeout bounds the connect inside the sandbox.
const bridgeConnectTimeout = 30 * time.Second

// DialPort connects to a port on the sandbox's own loopback through envd: a bridge
// process in the sandbox (bridgeScript) whose stdin and stdout carry the connection
// (E2B's port hosts speak HTTP only). Writes become envd SendInput calls and the
// process's output is what the caller reads; closing the connection closes the
// bridge's stdin, which ends it. A refused port is an error here, not at the first
// read. Deadlines work as on any net.Conn (net.Pipe's).
func (e *Engine) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial port %d: out of range", port)
	}
	ev, err := e.envd(ctx, id)
	if err != nil {
		return nil, err
	}
	local, remote := net.Pipe()
	connected := &lineWaiter{want: "connected\n", ch: make(chan struct{})}
	// The bridge outlives the dial's context: it ends with the connection.
	p, err := ev.Start(context.WithoutCancel(ctx), StartOptions{Cmd: "/bin/bash",
		Args: []string{"-c", bridgeScript, "bridge", strconv.Itoa(port)}, Stdin: true,
		Stdout: pipeWriter{remote}, Stderr: connected})
	if err != nil {
		local.Close()
		remote.Close()
		return nil, fmt.Errorf("dial port %d: %w", port, engineErr(err))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Wait(context.Background())
		remote.Close() // the caller reads EOF once it has read all the output
	}()
	timer := time.NewTimer(bridgeConnectTimeout)
	defer timer.Stop()
	select {
	case <-connected.ch:
	case <-done:
		local.Close()
		return nil, fmt.Errorf("dial port %d in sandbox %s: %s", port, id, strings.TrimSpace(connected.text()))
	case <-ctx.Done():
		e.endBridge(ev, p, done)
		local.Close()
		return nil, ctx.Err()
	case <-timer.C:
		e.endBridge(ev, p, done)
		local.Close()
		return nil, fmt.Errorf("dial port %d in sandbox %s: no connection after %v", port, id, bridgeConnectTimeout)
	}
	go func() {
		// The caller's writes go to the bridge's stdin; the caller's Close (or the
		// bridge's end, which closes remote) ends the loop and the bridge.
		defer e.endBridge(ev, p, done)
		buf := make([]byte, 32<<10)
		for {
			n, err := remote.Read(buf)
			if n > 0 {
				sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				serr := ev.SendInput(sctx, p.PID, buf[:n])
				cancel()
				if serr != nil {
					remote.Close()
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return local, nil
}

// endBridge closes the bridge's stdin, which ends it, and kills it when it is still
// there after a grace period.
func (e *Engine) endBridge(ev *Envd, p *Process, done <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = ev.CloseStdin(ctx, p.PID)
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.Kill(ctx)
	p.Detach()
}

// pipeWriter writes the bridge's output to the connection; once the caller has closed
// it, the output is dropped (the bridge is ending).
type pipeWriter struct{ c net.Conn }

func (w pipeWriter) Write(b []byte) (int, error) {
	if _, err := w.c.Write(b); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		return 0, err
	}
	return len(b), nil
}

// lineWaiter collects a process's stderr and closes ch once it holds want.
type lineWaiter struct {
	want string
	ch   chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func (l *lineWaiter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 4096 {
		l.buf.Write(b)
	}
	if !l.done && strings.Contains(l.buf.String(), l.want) {
		l.done = true
		close(l.ch)
	}
	return len(b), nil
}

func (l *lineWaiter) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
