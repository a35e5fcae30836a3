package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/capped"
)

// bridgeScript connects to 127.0.0.1:$1 inside the sandbox and joins the connection
// to its own stdin and stdout: bash's /dev/tcp, which every image with bash has (no
// nc or socat needed). Its output starts with one byte, connectedMark, once the connect
// succeeded (in the same stream as the data, so nothing can overtake it). Whichever
// side ends first (the server closes, or the caller closes stdin) ends both copies
// and the process.
const bridgeScript = `exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
printf +
cat <&3 & r=$!
cat <&0 >&3 & w=$!
wait -n
kill $r $w 2>/dev/null
exit 0`

// connectedMark is the first byte of a bridge's output.
const connectedMark = '+'

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
	stderr := &capped.Buffer{Max: 2048}
	// The bridge outlives the dial's context: it ends with the connection.
	p, err := ev.Start(context.WithoutCancel(ctx), StartOptions{Cmd: "/bin/bash",
		Args: []string{"-c", bridgeScript, "bridge", strconv.Itoa(port)}, Stdin: true,
		Stdout: pipeWriter{remote}, Stderr: stderr})
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
	if err := awaitMark(ctx, local); err != nil {
		local.Close()
		select {
		case <-done:
			return nil, fmt.Errorf("dial port %d in sandbox %s: %s", port, id, strings.TrimSpace(stderr.String()))
		default:
		}
		e.endBridge(ev, p, done)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("dial port %d in sandbox %s: %w", port, id, err)
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

// awaitMark reads the bridge's connectedMark from c, within bridgeConnectTimeout and
// ctx.
func awaitMark(ctx context.Context, c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(bridgeConnectTimeout))
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("no connection: %w", err)
	}
	if b[0] != connectedMark {
		return fmt.Errorf("bridge answered %q", b[0])
	}
	return c.SetReadDeadline(time.Time{})
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
