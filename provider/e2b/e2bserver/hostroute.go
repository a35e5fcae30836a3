package e2bserver

// E2B routes https://<port>-<id>.<domain> to a port inside the sandbox (the SDKs'
// getHost); so does this server, by the Host header: envd's port goes to envd, any
// other port through the engine's DialPort, plain HTTP and WebSocket upgrades alike.
// As on E2B, these URLs need no token unless the sandbox was created with
// network.allowPublicTraffic false: then its traffic access token, in a header.

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// headerTraffic carries a sandbox's traffic access token to its port hosts.
const headerTraffic = "E2b-Traffic-Access-Token"

// hostTarget parses a <port>-<id>.<domain>[:serverport] Host.
func hostTarget(host string) (port int, id string, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, _, ok := strings.Cut(host, ".")
	if !ok {
		return 0, "", false
	}
	ps, id, ok := strings.Cut(label, "-")
	if !ok || id == "" || len(ps) > 5 {
		return 0, "", false
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != ps {
		return 0, "", false
	}
	return port, id, true
}

// portAddr is the made-up address the port transport dials: the engine id, hex
// encoded so that any id makes a valid host name, and the port.
func portAddr(eid string, port int) string {
	return "e" + hex.EncodeToString([]byte(eid)) + ".sandbox:" + strconv.Itoa(port)
}

func parsePortAddr(addr string) (eid string, port int, err error) {
	h, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	enc, ok := strings.CutSuffix(strings.TrimPrefix(h, "e"), ".sandbox")
	b, herr := hex.DecodeString(enc)
	port, perr := strconv.Atoi(ps)
	if !ok || herr != nil || perr != nil {
		return "", 0, fmt.Errorf("bad sandbox port address %q", addr)
	}
	return string(b), port, nil
}

// newPortTransport dials sandbox ports through the engine.
func (s *Server) newPortTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			eid, port, err := parsePortAddr(addr)
			if err != nil {
				return nil, err
			}
			return s.o.Engine.DialPort(ctx, eid, port)
		},
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
}

// proxyPort serves a request for port inside sandbox id.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, id string, port int) {
	sb, ok := s.lookup(id)
	if !ok {
		writeJSON(w, http.StatusBadGateway, e2bwire.APIError{Code: 502, Message: "sandbox " + id + " not found"})
		return
	}
	if st, err := s.state(r.Context(), sb); err != nil || st != e2bwire.StateRunning {
		writeJSON(w, http.StatusBadGateway, e2bwire.APIError{Code: 502, Message: "sandbox " + id + " is not running"})
		return
	}
	s.mu.Lock()
	eid, traffic := sb.engineID, sb.traffic
	s.mu.Unlock()
	if traffic != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(headerTraffic)), []byte(traffic)) != 1 {
		writeJSON(w, http.StatusForbidden, e2bwire.APIError{Code: 403, Message: "sandbox " + id + " needs its traffic access token in " + headerTraffic})
		return
	}
	r.Header.Del(headerTraffic) // the service inside never sees it
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = portAddr(eid, port)
			pr.Out.Host = pr.In.Host // the service sees the URL it was called by
			pr.SetXForwarded()
		},
		Transport: s.portTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Debug("port proxy", "sandbox_id", id, "port", port, "err", err)
			writeJSON(w, http.StatusBadGateway, e2bwire.APIError{Code: 502,
				Message: fmt.Sprintf("sandbox %s is running but nothing answers on port %d", id, port)})
		},
	}
	rp.ServeHTTP(w, r)
}
