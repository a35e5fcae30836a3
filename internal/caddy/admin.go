package caddy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// admin talks to Caddy's admin endpoint over TCP or a unix socket.
type admin struct {
	// addr is as configured, for messages.
	addr    string
	network string // "tcp" or "unix"
	dial    string // host:port or socket path
}

// parseAdmin accepts Caddy's admin address forms: "localhost:2019", ":2019",
// "http://host:port", "unix//abs/path.sock".
func parseAdmin(s string) (admin, error) {
	a := admin{addr: s}
	switch {
	case strings.HasPrefix(s, "unix/"):
		a.network, a.dial = "unix", strings.TrimPrefix(s, "unix/")
		if !strings.HasPrefix(a.dial, "/") {
			return admin{}, fmt.Errorf("admin address %q: unix socket path must be absolute (unix//path)", s)
		}
		return a, nil
	case strings.HasPrefix(s, "http://"):
		s = strings.TrimSuffix(strings.TrimPrefix(s, "http://"), "/")
	case strings.Contains(s, "://"):
		return admin{}, fmt.Errorf("admin address %q: only http:// and unix// are supported", s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return admin{}, fmt.Errorf("admin address %q: %w", a.addr, err)
	}
	if host == "" {
		host = "localhost"
	}
	a.network, a.dial = "tcp", net.JoinHostPort(host, port)
	return a, nil
}

// do sends one request and returns the response body when the status is 2xx.
func (a admin) do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, a.network, a.dial)
	if err != nil {
		return nil, fmt.Errorf("reach caddy admin endpoint %s: %w", a.addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	// Caddy checks the Host header: over a unix socket it must be empty, which
	// only Request.Write (not http.Transport) can send.
	u := "http://" + a.dial + path
	if a.network == "unix" {
		u = "http:///" + strings.TrimPrefix(path, "/")
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build caddy admin request: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("send %s %s to caddy admin endpoint %s: %w", method, path, a.addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return nil, fmt.Errorf("read answer to %s %s from caddy admin endpoint %s: %w", method, path, a.addr, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read answer to %s %s from caddy admin endpoint %s: %w", method, path, a.addr, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(rb))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(rb, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, fmt.Errorf("caddy admin endpoint %s refused %s %s: %s: %s", a.addr, method, path, resp.Status, msg)
	}
	return rb, nil
}

// dials reports whether the JSON config v has a reverse-proxy upstream that dials addr.
func dials(v any, addr string) bool {
	switch v := v.(type) {
	case map[string]any:
		if d, ok := v["dial"].(string); ok && d == addr {
			return true
		}
		for _, e := range v {
			if dials(e, addr) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if dials(e, addr) {
				return true
			}
		}
	}
	return false
}
