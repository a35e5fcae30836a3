// Package link is the bastion's path from the controller into the agent
// sandbox (model C, docs/bastion.md) where the engine's DialPort is a
// host-side call the controller, itself a sandbox, cannot make.
//
// The agent runs a relay (Relay.Serve, `sandbox-mcp relay`) on a unix socket
// on the shared workspace volume; the controller's ingress dials it (Dial)
// and opens every connection with a one-line preamble naming the agent's
// port, "port <n>\n" (at most rules.BastionRelayMaxPreamble bytes). The
// relay checks the line (ParsePreamble), connects to 127.0.0.1:<n> inside the
// agent and copies bytes both ways; anything else closes the connection.
//
// The relay authenticates nothing, by design: the socket lies on a volume
// the agent's root can write, so root inside could replace it with its own
// listener anyway, and it would only be talking to itself. What keeps the
// agent's services closed is the controller's ingress, which authenticates
// every request before it dials; the relay's socket is reachable only from
// the two sandboxes of the pair.
//
// The controller's sandbox-mcp imports Dial; the agent's sandbox-mcp runs
// Relay.
package link

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ParsePreamble reads the port of a preamble line "port <n>\n": n in
// 1-65535, decimal without a leading zero or sign, nothing else on the line.
func ParsePreamble(line string) (int, error) {
	if len(line) > rules.BastionRelayMaxPreamble {
		return 0, errors.New("preamble is too long")
	}
	rest, ok := strings.CutSuffix(line, "\n")
	if !ok {
		return 0, errors.New("preamble does not end with a newline")
	}
	ps, ok := strings.CutPrefix(rest, "port ")
	if !ok {
		return 0, errors.New(`preamble does not start with "port "`)
	}
	if ps == "" || len(ps) > 5 || ps[0] == '0' {
		return 0, fmt.Errorf("preamble port %q is not a port number", ps)
	}
	for _, c := range ps {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("preamble port %q is not a port number", ps)
		}
	}
	port, _ := strconv.Atoi(ps)
	if port > 65535 {
		return 0, fmt.Errorf("preamble port %d is out of range 1-65535", port)
	}
	return port, nil
}

// Preamble is the line that asks the relay for port.
func Preamble(port int) string { return "port " + strconv.Itoa(port) + "\n" }

// Dial connects to port of the agent through the relay listening on socket.
func Dial(ctx context.Context, socket string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial agent port %d: out of range 1-65535", port)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("dial the agent's relay at %s (is the agent sandbox running its relay?): %w", socket, err)
	}
	if _, err := io.WriteString(c, Preamble(port)); err != nil {
		c.Close()
		return nil, fmt.Errorf("write the relay preamble: %w", err)
	}
	return c, nil
}

// Listen listens on the unix socket path, making its directory and replacing
// a stale socket (one left by an earlier run); a file there that is not a
// socket is an error.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("make the socket's directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}

// Relay is the agent's side of the link.
type Relay struct {
	// Host is where ports are dialled; default 127.0.0.1.
	Host string
	// PreambleTimeout bounds the wait for a connection's preamble; default
	// 10 s.
	PreambleTimeout time.Duration
	// Logger receives one line per refused connection; default discards.
	Logger *slog.Logger
}

// Serve relays every connection of ln until ctx ends, then closes ln and
// waits for the connections it relays.
func (r *Relay) Serve(ctx context.Context, ln net.Listener) error {
	host, timeout, log := r.Host, r.PreambleTimeout, r.Logger
	if host == "" {
		host = "127.0.0.1"
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "relay")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("relay: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := relayOne(ctx, c, host, timeout); err != nil {
				log.Info("relay refused", "err", err)
			}
		}()
	}
}

// relayOne reads c's preamble, connects to its port on host and copies both
// ways until either side ends or ctx does.
func relayOne(ctx context.Context, c net.Conn, host string, timeout time.Duration) error {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	br := bufio.NewReaderSize(io.LimitReader(c, rules.BastionRelayMaxPreamble), rules.BastionRelayMaxPreamble)
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read preamble: %w", err)
	}
	port, err := ParsePreamble(line)
	if err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Time{})
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("dial port %d: %w", port, err)
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	// Either side ending ends both: a half-closed relay would hold the
	// connection for as long as the slower side cares to.
	done := make(chan struct{}, 2)
	go func() {
		// br holds what arrived with the preamble past its newline; the
		// rest comes from c itself.
		_, _ = io.Copy(up, io.MultiReader(br, c))
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(c, up)
		done <- struct{}{}
	}()
	<-done
	c.Close()
	up.Close()
	<-done
	return nil
}
