package modal

// Reaching a sandbox's ports and starting what nobody waits for: tunnels (PortURL,
// DialPort), the client that trusts their certificate, and detached execs.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// PortURL is the URL of the port's tunnel (https:// for the encrypted ports of
// Spec.Ports).
func (e *Engine) PortURL(ctx context.Context, id string, port int) (string, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return "", err
	}
	ts, err := sb.Tunnels(ctx, TunnelTimeout, nil)
	if err != nil {
		return "", gone(ctx, sb, notFound(err))
	}
	if t := ts[port]; t != nil {
		return t.URL(), nil
	}
	return "", fmt.Errorf("modal: sandbox %s has no tunnel for port %d (not in Spec.Ports)", id, port)
}

// PortClient is an HTTP client that trusts Options.TLS's roots (the local server's
// tunnel certificate).
func (e *Engine) PortClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: e.o.TLS}}
}

// StartDetached starts req as an exec nobody waits for: on Modal it lives as long as
// the sandbox. Modal does not tell its pid: 0.
func (e *Engine) StartDetached(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return 0, err
	}
	env := map[string]string{}
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	_, err = sb.Exec(ctx, req.Argv, &modalsdk.SandboxExecParams{Workdir: req.Cwd, Env: env,
		Stdout: modalsdk.Ignore, Stderr: modalsdk.Ignore})
	return 0, gone(ctx, sb, notFound(err))
}

// DialPort connects to a sandbox port through its tunnel (TLS for encrypted ports),
// or, for a port given no tunnel at create, through an exec relay (relay.go).
func (e *Engine) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	ts, err := sb.Tunnels(ctx, TunnelTimeout, nil)
	if err != nil {
		return nil, notFound(err)
	}
	t := ts[port]
	if t == nil {
		// Not tunnelled at create: through an exec inside the sandbox.
		c, err := relayPort(ctx, sb, port)
		return c, gone(ctx, sb, notFound(err))
	}
	if h, p, err := t.TCPSocket(); err == nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", net.JoinHostPort(h, strconv.Itoa(p)))
	}
	d := tls.Dialer{Config: e.o.TLS}
	return d.DialContext(ctx, "tcp", net.JoinHostPort(t.Host, strconv.Itoa(t.Port)))
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
