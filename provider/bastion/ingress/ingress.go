// Package ingress is the bastion controller's only door to the agent
// sandbox (model C, docs/bastion.md). The agent has no port of its own on
// the host or on the engine's public side; every request for its services,
// terminal or previews arrives here, is authenticated, and is forwarded
// over a connection the engine dials into the agent (engine DialPort).
//
// A request for /port/<n>/rest goes to port n of the agent as /rest, HTTP
// and WebSocket upgrades alike (net/http/httputil's ReverseProxy carries
// the upgrade). It must carry the platform's token, as "Authorization:
// Bearer <token>" or, on a WebSocket upgrade only, in the access_token query
// parameter (a browser cannot set a WebSocket's headers), either the static token (compared in constant time) or, when
// a JWT key is configured, an HS256 JWT whose exp is in the future. A
// request without valid authentication gets 401 and nothing reaches the
// agent. The credential is removed (header and query parameter) before the
// request is forwarded: the agent never sees the platform's token.
//
// The host side (provider) imports it; it knows nothing of engines beyond
// the dial function it is given.
package ingress

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// DialFunc opens a connection to a port of the agent sandbox (the engine's
// DialPort).
type DialFunc func(ctx context.Context, port int) (net.Conn, error)

// Config configures a Handler.
type Config struct {
	// Token is the platform's bearer token; required unless JWTKey is set.
	Token string
	// JWTKey, when set, makes HS256 JWTs signed with it valid as well; they
	// must carry an exp in the future.
	JWTKey []byte
	// Dial reaches the agent sandbox; required.
	Dial DialFunc
	// Ports are the agent's ports a request may reach; required, since a
	// port not named (the sidecar's own admin port, say) stays closed.
	Ports []int
	// Logger receives one line per refused or failed request; default
	// discards. Nothing secret is logged.
	Logger *slog.Logger
	// UpstreamTokens are the bearer tokens the agent's own services ask for,
	// by port (the agent's sidecar's token): a forwarded request to such a
	// port carries "Authorization: Bearer <token>" in place of the platform's
	// credential. The agent knows these already; the platform need not.
	UpstreamTokens map[int]string
	// Now is the clock JWTs are checked against; default time.Now.
	Now func() time.Time
}

// Handler is the ingress. Safe for concurrent use.
type Handler struct {
	token  []byte
	jwtKey []byte
	ports  map[int]bool
	up     map[int]string
	log    *slog.Logger
	now    func() time.Time
	proxy  *httputil.ReverseProxy
}

// New checks cfg and returns the Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Token == "" && len(cfg.JWTKey) == 0 {
		return nil, errors.New("ingress: set Token or JWTKey: a door without a key opens for anyone")
	}
	if cfg.Dial == nil {
		return nil, errors.New("ingress: Dial is required (the engine's DialPort into the agent)")
	}
	if len(cfg.Ports) == 0 {
		return nil, errors.New("ingress: Ports is empty: name the agent ports the ingress may reach")
	}
	h := &Handler{token: []byte(cfg.Token), jwtKey: cfg.JWTKey, ports: map[int]bool{}, up: cfg.UpstreamTokens, log: cfg.Logger, now: cfg.Now}
	for _, p := range cfg.Ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("ingress: port %d is out of range 1-65535", p)
		}
		h.ports[p] = true
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.log = h.log.With("component", "ingress")
	if h.now == nil {
		h.now = time.Now
	}
	dial := cfg.Dial
	transport := &http.Transport{
		// The URL's host is localhost:<port>; the port is all the dial needs.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, ps, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(ps)
			if err != nil {
				return nil, err
			}
			return dial(ctx, port)
		},
		Proxy:               nil,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     rules.IdleConnTimeout,
		ForceAttemptHTTP2:   false,
	}
	h.proxy = &httputil.ReverseProxy{
		Transport: transport,
		Rewrite:   func(*httputil.ProxyRequest) {}, // set per request in ServeHTTP
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			h.log.Warn("forward to agent", "path", r.URL.Path, "err", err)
			writeError(w, http.StatusBadGateway, "the agent sandbox did not answer; check that its service is running")
		},
	}
	return h, nil
}

// ServeHTTP authenticates r and forwards it to the agent.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.authenticated(r) {
		h.log.Info("refused unauthenticated request", "path", r.URL.Path, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox"`)
		writeError(w, http.StatusUnauthorized, "missing or invalid token: send Authorization: Bearer <platform token>")
		return
	}
	port, rest, ok := SplitPath(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, "want a path of the form "+rules.BastionPortPrefix+"<port>/…")
		return
	}
	if !h.ports[port] {
		writeError(w, http.StatusForbidden, fmt.Sprintf("port %d of the agent is not open to the ingress", port))
		return
	}
	p := *h.proxy
	p.Rewrite = func(pr *httputil.ProxyRequest) {
		out := pr.Out
		out.URL.Scheme = "http"
		out.URL.Host = "localhost:" + strconv.Itoa(port)
		out.URL.Path, out.URL.RawPath = rest, ""
		q := out.URL.Query()
		if q.Has(rules.BastionTokenQuery) {
			q.Del(rules.BastionTokenQuery)
			out.URL.RawQuery = q.Encode()
		}
		out.Host = out.URL.Host
		out.Header.Del("Authorization")
		if tok := h.up[port]; tok != "" {
			out.Header.Set("Authorization", "Bearer "+tok)
		}
		// The upstream sees where the request came from, as a preview
		// server behind any proxy would.
		pr.SetXForwarded()
	}
	p.ServeHTTP(w, r)
}

// SplitPath splits /port/<n>/rest into n and /rest; ok is false when path
// is not of that form.
func SplitPath(path string) (port int, rest string, ok bool) {
	after, found := strings.CutPrefix(path, rules.BastionPortPrefix)
	if !found {
		return 0, "", false
	}
	ps, rest, _ := strings.Cut(after, "/")
	rest = "/" + rest
	if ps == "" || len(ps) > 5 || ps[0] == '0' {
		return 0, "", false
	}
	for _, c := range ps {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	port, _ = strconv.Atoi(ps)
	if port > 65535 {
		return 0, "", false
	}
	return port, rest, true
}

// authenticated reports whether r carries the static token or a valid JWT.
func (h *Handler) authenticated(r *http.Request) bool {
	cred, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && isWebSocket(r) {
		// Only an upgrade may carry the token in its URL: a page's URL is
		// readable by the page's own script, which the agent wrote.
		cred = r.URL.Query().Get(rules.BastionTokenQuery)
	}
	if cred == "" {
		return false
	}
	if len(h.token) > 0 && subtle.ConstantTimeCompare([]byte(cred), h.token) == 1 {
		return true
	}
	if len(h.jwtKey) > 0 {
		return VerifyJWT(cred, h.jwtKey, h.now()) == nil
	}
	return false
}

// isWebSocket reports whether r asks for a WebSocket upgrade.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
