// Package gateway serves the egress proxy of package egress to sandboxes of remote
// engines (Modal, E2B), whose traffic does not pass a proxy of ours on the way out.
// The platform runs the gateway (sandboxctl gateway); an engine adapter registers a
// sandbox's secrets before it creates the sandbox and gets back a credential, the
// placeholders and the trust to put inside; the sandbox then reaches the gateway as
// its HTTPS_PROXY, http://<credential>@gateway:port. A credential is good only for its
// sandbox's secrets and dies when the adapter unregisters it (at terminate) or at the
// end of the lifetime it was registered with (the sandbox's Timeout and
// rules.GatewayGrace), whichever comes first: a sandbox that ends on its own, with
// nobody to terminate it, leaves neither a live credential nor a registration behind
// for longer than that. After create the adapter binds the registration to the
// engine's sandbox id, so that terminate releases it by that id alone, even when the
// engine no longer reports the sandbox or its labels.
//
// Registration is a Go API (Gateway) and the same over HTTP for a gateway in another
// process (AdminHandler, Client), both behind the Registrar interface.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ErrUnknown marks an id that is not registered.
var ErrUnknown = errors.New("no such registration")

// Registration is what a sandbox gets for its secrets.
type Registration struct {
	// Credential authenticates the sandbox to the gateway (Proxy-Authorization, as
	// the user of its proxy URL).
	Credential string `json:"credential"`
	// Env is NAME=placeholder for each secret.
	Env []string `json:"env"`
	// TrustPEM is the sandbox's authority, to add to its trust.
	TrustPEM []byte `json:"trust_pem"`
}

// ProxyEnv is the environment that sends a sandbox's HTTP(S) through the gateway at
// addr (host:port as the sandbox reaches it) with credential (with
// rules.EnvNodeUseEnvProxy, for Node's fetch).
func ProxyEnv(addr, credential string) []string {
	u := "http://" + credential + "@" + addr
	return []string{"HTTPS_PROXY=" + u, "HTTP_PROXY=" + u, "https_proxy=" + u, "http_proxy=" + u, rules.EnvNodeUseEnvProxy + "=1"}
}

// Registrar registers sandboxes with a gateway: a Gateway in this process or a Client
// of one in another.
type Registrar interface {
	// Register makes a credential for the sandbox id (any key unique to the sandbox)
	// and its secrets, good for ttl (zero: until unregistered; at most
	// rules.MaxGatewayTTL); a second Register of the same id replaces the first.
	Register(ctx context.Context, id string, secrets []engine.Secret, ttl time.Duration) (Registration, error)
	// Unregister ends id's credential; an unknown id is not an error.
	Unregister(ctx context.Context, id string) error
	// Bind names the engine's sandbox that holds id's credential, for
	// UnregisterSandbox and Extend; ErrUnknown when id is not registered.
	Bind(ctx context.Context, id, sandbox string) error
	// UnregisterSandbox ends the credential bound to the engine's sandbox; an
	// unbound sandbox is not an error.
	UnregisterSandbox(ctx context.Context, sandbox string) error
	// Extend moves the deadline of the credential bound to sandbox to ttl from now,
	// unless it is later already (an engine that lengthened the sandbox's life); zero
	// takes the deadline away (a paused sandbox, whose lifetime stands still). An
	// unbound sandbox is not an error.
	Extend(ctx context.Context, sandbox string, ttl time.Duration) error
}

// Config configures a Gateway.
type Config struct {
	// Proxy is the template of every sandbox's proxy (Dial, Lookup, LocalAddrs,
	// RootCAs, Hosts); its Secrets and Log are the gateway's to set.
	Proxy egress.Config
	// Log receives what the gateway refuses; nil discards.
	Log *slog.Logger
	// Sweep is how often registrations past their deadline are forgotten; zero means
	// a minute. A credential past its deadline is refused at once, swept or not.
	Sweep time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Gateway is the proxy of many sandboxes, told apart by their credentials; an
// http.Handler.
type Gateway struct {
	c   Config
	log *slog.Logger

	mu        sync.Mutex
	byID      map[string]*entry
	byHash    map[[32]byte]*entry
	bySandbox map[string]*entry

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type entry struct {
	id, sandbox string
	hash        [32]byte
	deadline    time.Time // zero: none
	proxy       *egress.Proxy
}

var _ Registrar = (*Gateway)(nil)

// New makes a gateway and starts its sweep; Close stops it.
func New(c Config) *Gateway {
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if c.Sweep <= 0 {
		c.Sweep = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	g := &Gateway{c: c, log: log.With("component", "egress_gateway"), byID: map[string]*entry{}, byHash: map[[32]byte]*entry{},
		bySandbox: map[string]*entry{}, stop: make(chan struct{}), done: make(chan struct{})}
	go g.sweepLoop()
	return g
}

// checkTTL refuses a registration's lifetime outside [0, rules.MaxGatewayTTL].
func checkTTL(ttl time.Duration) error {
	if ttl < 0 || ttl > rules.MaxGatewayTTL {
		return fmt.Errorf("a credential's lifetime of %v is outside 0 (none) to %v; give the sandbox a shorter Timeout", ttl, rules.MaxGatewayTTL)
	}
	return nil
}

// Register implements Registrar.
func (g *Gateway) Register(_ context.Context, id string, list []engine.Secret, ttl time.Duration) (Registration, error) {
	if id == "" {
		return Registration{}, errors.New("register with the gateway: an id is required")
	}
	if err := checkTTL(ttl); err != nil {
		return Registration{}, fmt.Errorf("register with the gateway: %w", err)
	}
	s, err := egress.NewSecrets(list)
	if err != nil {
		return Registration{}, err
	}
	pc := g.c.Proxy
	pc.Secrets, pc.Log = s, g.log.With("sandbox", id)
	p, err := egress.New(pc)
	if err != nil {
		return Registration{}, err
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Registration{}, fmt.Errorf("make a credential: %w", err)
	}
	cred := hex.EncodeToString(b[:])
	e := &entry{id: id, hash: sha256.Sum256([]byte(cred)), proxy: p}
	if ttl > 0 {
		e.deadline = g.c.Now().Add(ttl)
	}
	g.mu.Lock()
	old := g.byID[id]
	if old != nil {
		g.dropLocked(old)
	}
	g.byID[id], g.byHash[e.hash] = e, e
	g.mu.Unlock()
	if old != nil {
		old.proxy.Close()
	}
	return Registration{Credential: cred, Env: s.Env(), TrustPEM: s.TrustPEM()}, nil
}

// Unregister implements Registrar.
func (g *Gateway) Unregister(_ context.Context, id string) error {
	g.drop(func() *entry { return g.byID[id] })
	return nil
}

// drop forgets the entry pick returns (called with g.mu held), if any, and closes its proxy.
func (g *Gateway) drop(pick func() *entry) {
	g.mu.Lock()
	e := pick()
	if e != nil {
		g.dropLocked(e)
	}
	g.mu.Unlock()
	if e != nil {
		e.proxy.Close()
	}
}

// Close stops the sweep and unregisters every sandbox.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() { close(g.stop) })
	<-g.done
	g.mu.Lock()
	all := g.byID
	g.byID, g.byHash, g.bySandbox = map[string]*entry{}, map[[32]byte]*entry{}, map[string]*entry{}
	g.mu.Unlock()
	for _, e := range all {
		e.proxy.Close()
	}
}

// credential is the user (or, failing that, the password) of a Basic
// Proxy-Authorization.
func credential(r *http.Request) string {
	scheme, v, ok := strings.Cut(r.Header.Get("Proxy-Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return ""
	}
	user, pass, _ := strings.Cut(string(raw), ":")
	if user == "" {
		return pass
	}
	return user
}

// ServeHTTP serves a sandbox's proxy request, after its credential.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cred := credential(r)
	var e *entry
	if cred != "" {
		e = live(g, g.byHash, sha256.Sum256([]byte(cred)))
	}
	if e == nil {
		g.log.Info("refused a request without a live credential", "remote", r.RemoteAddr)
		w.Header().Set("Proxy-Authenticate", `Basic realm="sandbox egress gateway"`)
		http.Error(w, "the gateway needs the sandbox's credential (Proxy-Authorization); it ends at terminate or with the sandbox's lifetime", http.StatusProxyAuthRequired)
		return
	}
	r.Header.Del("Proxy-Authorization")
	e.proxy.ServeHTTP(w, r)
}

// Counters are the counters of id's proxy.
func (g *Gateway) Counters(id string) (egress.Counters, error) {
	e := live(g, g.byID, id)
	if e == nil {
		return egress.Counters{}, fmt.Errorf("%s: %w", id, ErrUnknown)
	}
	return e.proxy.Counters(), nil
}
