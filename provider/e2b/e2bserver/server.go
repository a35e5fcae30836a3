// Package e2bserver is a local E2B-compatible server: E2B's control-plane REST API and,
// per sandbox, the envd API (Connect protocol with JSON, and /files), backed by any
// provider/engine Engine. Point the official SDKs or provider/e2b at it with
// E2B_API_URL=http://ADDR and E2B_SANDBOX_URL=http://ADDR: envd calls are routed by
// the E2b-Sandbox-Id header the SDKs send (or by a 49983-<id>.<domain> Host).
//
// What maps to what:
//   - a template is an image the engine boots (Options.Templates: "base" is the
//     engine's default root unless mapped to an image) or a snapshot id made by
//     POST /sandboxes/{id}/snapshots;
//   - pause is the engine's Pause when it has one; otherwise the sandbox is
//     snapshotted and stopped, and connect starts it again from that snapshot under the
//     same sandbox id: files are kept, running processes are not. The answer of such a
//     pause carries the header X-E2b-Local-Pause: snapshot, and the server logs it;
//   - a sandbox's timeout is kept by this server (engine sandboxes have no mutable
//     timeout): when it passes the sandbox is killed, or paused when autoPause was set;
//   - ports inside a sandbox are reached through the extension route
//     GET /sandboxes/{id}/ports/{port}, which answers a loopback URL forwarding to
//     that port (E2B itself uses the host <port>-<id>.<domain>).
//
// State (tokens, templates, metadata) is kept in the engine's labels, so a restarted
// server serves the sandboxes it created before; timers, forwarders and processes
// started through envd belong to the server process and end with it.
package e2bserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// Options configure a Server.
type Options struct {
	// Engine runs the sandboxes; required.
	Engine engine.Engine
	// APIKey is the X-API-Key every control-plane call must carry; required.
	APIKey string
	// Domain is the sandbox domain reported to clients; empty means "localhost".
	Domain string
	// Templates map template ids to the image their sandboxes boot (engine.Spec.Image,
	// an id or name the engine's image store resolves); an empty image is the engine's
	// default root. Nil means {"base": ""}. Any other template id is looked up as a
	// snapshot id. An image needs an engine with Capabilities.Images.
	Templates map[string]string
	// Env is added to every sandbox's environment, before the create request's
	// envVars (PATH, say).
	Env []string
	// Mounts are bound into every sandbox (the sandbox-mcp binary, say).
	Mounts []engine.Mount
	// Egress lets sandboxes reach the outside through the engine's egress proxy, as
	// E2B sandboxes reach the internet, unless a create asks for
	// allow_internet_access false; false means loopback only for every sandbox. A
	// sandbox never shares the host's network (engine.Spec.Network): its ports stay
	// its own, as on E2B.
	Egress bool
	// MaxUpload bounds one uploaded file; zero means 256 MiB.
	MaxUpload int64
	// MaxUploads bounds the uploads streaming at once (each holds a command in its
	// sandbox and a few buffers); more wait their turn, unread. Zero means 4.
	MaxUploads int
	// MaxWatchers bounds the directory watchers (files.watchDir) at once; more are
	// refused. Zero means 64.
	MaxWatchers int
	// Logger receives lifecycle events; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// EnvdVersion is the envd version this server reports: new enough that the SDKs use
// the default user, stdin control and octet-stream uploads.
const EnvdVersion = "0.5.7"

// Label keys under which a sandbox's E2B state lives in the engine.
const (
	labelSandbox  = "e2b.sandbox"
	labelTemplate = "e2b.template"
	labelToken    = "e2b.token"
	labelTraffic  = "e2b.traffic"
	labelMeta     = "e2b.meta."
)

// Server is the local E2B server. Its methods are safe for concurrent use.
type Server struct {
	o             Options
	log           *slog.Logger
	templates     map[string]string // Options.Templates, copied
	handler       http.Handler
	uploads       chan struct{}   // a semaphore of Options.MaxUploads
	watchers      chan struct{}   // a semaphore of Options.MaxWatchers
	portTransport *http.Transport // to ports inside sandboxes (hostroute.go)

	mu        sync.Mutex
	sandboxes map[string]*sandbox // by E2B sandbox id
	snapshots map[string]snapshot // by snapshot id, made through this server
	volTokens map[string]string   // by volume id: the token VolumeAndToken carries
	closed    bool
	// base is the context of every process started through envd; Close cancels it.
	base context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup // process goroutines and forwarders
}

type snapshot struct {
	ID        string
	SandboxID string
}

// sandbox is one E2B sandbox. engineID differs from id once a sandbox paused by
// snapshot-and-stop was started again.
type sandbox struct {
	id        string
	engineID  string
	template  string
	token     string
	traffic   string // the port hosts' token; empty: public, as E2B's default
	metadata  map[string]string
	envVars   map[string]string
	started   time.Time
	end       time.Time
	autoPause bool
	// diskPause makes the timeout's pause filesystem-only (autoPauseMemory false).
	diskPause bool
	network   bool
	// egressHosts, with network, are the only destinations (network.allowOut under a
	// denyOut of everything); empty: any.
	egressHosts []string
	// stopped is set while a snapshot-and-stop pause holds the sandbox as stoppedSnap.
	stopped     bool
	stoppedSnap string
	timer       *time.Timer
	procs       *procTable
	forwards    map[int]*portfwd.Forwarder
	volumes     []engine.VolumeMount // volumeMounts of create, kept for a resume
}

// New checks the options, recovers the sandboxes a previous server created on the
// same engine, and returns a Server.
func New(o Options) (*Server, error) {
	if o.Engine == nil {
		return nil, errors.New("e2bserver: an engine is required")
	}
	if o.APIKey == "" {
		return nil, errors.New("e2bserver: an API key is required")
	}
	if o.Domain == "" {
		o.Domain = "localhost"
	}
	if len(o.Templates) == 0 {
		o.Templates = map[string]string{"base": ""}
	}
	for name, img := range o.Templates {
		if name == "" {
			return nil, errors.New("e2bserver: a template id must not be empty")
		}
		if img != "" && !o.Engine.Capabilities().Images {
			return nil, fmt.Errorf("e2bserver: template %q boots image %q, but the engine boots no images", name, img)
		}
	}
	if o.MaxUpload <= 0 {
		o.MaxUpload = 256 << 20
	}
	if o.MaxWatchers <= 0 {
		o.MaxWatchers = 64
	}
	if o.MaxUploads <= 0 {
		o.MaxUploads = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, log: log.With("component", "e2bserver"), templates: maps.Clone(o.Templates),
		sandboxes: map[string]*sandbox{}, snapshots: map[string]snapshot{}, uploads: make(chan struct{}, o.MaxUploads), watchers: make(chan struct{}, o.MaxWatchers)}
	s.base, s.stop = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := o.Engine.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("e2bserver: list engine sandboxes: %w", err)
	}
	for _, in := range infos {
		if in.Labels[labelSandbox] == "" || in.State == engine.StateDead {
			continue
		}
		sb := s.fromLabels(in)
		s.sandboxes[sb.id] = sb
	}
	s.portTransport = s.newPortTransport()
	s.handler = s.routes()
	return s, nil
}

func (s *Server) fromLabels(in engine.Info) *sandbox {
	meta := map[string]string{}
	for k, v := range in.Labels {
		if key, ok := strings.CutPrefix(k, labelMeta); ok {
			meta[key] = v
		}
	}
	return &sandbox{id: in.Labels[labelSandbox], engineID: in.ID, template: in.Labels[labelTemplate],
		token: in.Labels[labelToken], traffic: in.Labels[labelTraffic], metadata: meta, started: in.Created,
		procs: newProcTable(), forwards: map[int]*portfwd.Forwarder{}, volumes: in.Volumes}
}

// Handler serves the control plane and envd.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then shuts down.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		// Streams (process output, watchers) outlast the grace: cut them.
		_ = hs.Close()
	}
	<-errc
	return nil
}

// ListenAndServe listens on addr (loopback unless the caller says otherwise) and
// serves until ctx ends. ready, when not nil, is called with the bound address.
func (s *Server) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	return s.Serve(ctx, ln)
}

// Close stops the timers and forwarders and kills the processes started through
// envd (their lifetime is this server's); the sandboxes stay in the engine.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, sb := range s.sandboxes {
		s.stopLocked(sb)
	}
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
	s.portTransport.CloseIdleConnections()
	return nil
}

// stopLocked ends what the server runs for sb: its timer, forwarders and processes.
func (s *Server) stopLocked(sb *sandbox) {
	s.detachLocked(sb)
	sb.procs.killAll()
}

// detachLocked stops sb's timer and closes its port forwarders; its processes are
// left alone (a paused sandbox keeps them).
func (s *Server) detachLocked(sb *sandbox) {
	if sb.timer != nil {
		sb.timer.Stop()
		sb.timer = nil
	}
	for p, f := range sb.forwards {
		f.Close()
		delete(sb.forwards, p)
	}
}

func newID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lookup returns a live sandbox by E2B id.
func (s *Server) lookup(id string) (*sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	return sb, ok
}

// engineState is the state of sb's engine sandbox; a gone one removes sb.
func (s *Server) state(ctx context.Context, sb *sandbox) (string, error) {
	s.mu.Lock()
	stopped, eid := sb.stopped, sb.engineID
	s.mu.Unlock()
	if stopped {
		return e2bwire.StatePaused, nil
	}
	in, err := s.o.Engine.Get(ctx, eid)
	if errors.Is(err, engine.ErrNotFound) || (err == nil && in.State == engine.StateDead) {
		s.forget(sb)
		return "", errNotFound(sb.id)
	}
	if err != nil {
		return "", err
	}
	if in.State == engine.StatePaused {
		return e2bwire.StatePaused, nil
	}
	return e2bwire.StateRunning, nil
}

// forget drops sb from the table and stops what the server ran for it.
func (s *Server) forget(sb *sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.sandboxes[sb.id]; ok && cur == sb {
		delete(s.sandboxes, sb.id)
	}
	s.stopLocked(sb)
}

// setTimeout makes sb end (or pause) d from now.
func (s *Server) setTimeoutLocked(sb *sandbox, d time.Duration) {
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.end = s.o.Now().Add(d)
	sb.timer = time.AfterFunc(d, func() { s.expire(sb) })
}

func (s *Server) expire(sb *sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.mu.Lock()
	if s.closed || s.sandboxes[sb.id] != sb {
		s.mu.Unlock()
		return
	}
	auto, disk := sb.autoPause, sb.diskPause
	s.mu.Unlock()
	if auto {
		if _, err := s.pause(ctx, sb, disk); err != nil {
			s.log.Warn("auto-pause at timeout", "sandbox_id", sb.id, "err", err)
		}
		return
	}
	s.log.Info("sandbox timed out", "sandbox_id", sb.id)
	if err := s.kill(ctx, sb); err != nil {
		s.log.Warn("kill at timeout", "sandbox_id", sb.id, "err", err)
	}
}

func (s *Server) kill(ctx context.Context, sb *sandbox) error {
	s.forget(sb)
	s.mu.Lock()
	eid, stopped, snap := sb.engineID, sb.stopped, sb.stoppedSnap
	s.mu.Unlock()
	if stopped {
		s.mu.Lock()
		delete(s.snapshots, snap)
		s.mu.Unlock()
		return nil
	}
	return s.o.Engine.Terminate(ctx, eid)
}

// pause pauses sb; local is true when it was snapshotted and stopped, which disk
// asks for (and an engine without pause needs).
func (s *Server) pause(ctx context.Context, sb *sandbox, disk bool) (local bool, err error) {
	st, err := s.state(ctx, sb)
	if err != nil {
		return false, err
	}
	if st == e2bwire.StatePaused {
		return false, errConflict("sandbox " + sb.id + " is already paused")
	}
	s.mu.Lock()
	s.detachLocked(sb)
	eid := sb.engineID
	s.mu.Unlock()
	if !disk && s.o.Engine.Capabilities().Pause {
		if err := s.o.Engine.Pause(ctx, eid); err != nil {
			return false, err
		}
		s.log.Info("sandbox paused", "sandbox_id", sb.id)
		return false, nil
	}
	snap, err := s.o.Engine.Snapshot(ctx, eid)
	if err != nil {
		return false, fmt.Errorf("pause by snapshot: %w", err)
	}
	s.mu.Lock()
	sb.procs.killAll()
	sb.stopped, sb.stoppedSnap = true, snap
	s.mu.Unlock()
	if err := s.o.Engine.Terminate(ctx, eid); err != nil {
		return true, fmt.Errorf("pause by snapshot: stop: %w", err)
	}
	s.log.Warn("sandbox paused by snapshot and stop: files kept, processes ended", "sandbox_id", sb.id, "snapshot_id", snap)
	return true, nil
}

// resume makes sb run again; resumed is false when it already ran.
func (s *Server) resume(ctx context.Context, sb *sandbox, timeout time.Duration) (resumed bool, err error) {
	st, err := s.state(ctx, sb)
	if err != nil {
		return false, err
	}
	if st == e2bwire.StatePaused {
		resumed = true
		s.mu.Lock()
		stopped, snap, eid := sb.stopped, sb.stoppedSnap, sb.engineID
		s.mu.Unlock()
		if stopped {
			in, err := s.o.Engine.Create(ctx, s.spec(sb, snap))
			if err != nil {
				return false, fmt.Errorf("resume from snapshot %s: %w", snap, err)
			}
			s.mu.Lock()
			sb.engineID, sb.stopped, sb.stoppedSnap = in.ID, false, ""
			sb.procs = newProcTable()
			s.mu.Unlock()
		} else if err := s.o.Engine.Resume(ctx, eid); err != nil {
			return false, err
		}
		s.log.Info("sandbox resumed", "sandbox_id", sb.id)
	}
	s.mu.Lock()
	// Connect only ever extends the lifetime.
	if want := s.o.Now().Add(timeout); resumed || sb.timer == nil || want.After(sb.end) {
		s.setTimeoutLocked(sb, timeout)
	}
	s.mu.Unlock()
	return resumed, nil
}

// spec is the engine spec of sb: from snapshot when set, else from the image of sb's
// template.
func (s *Server) spec(sb *sandbox, snapshot string) engine.Spec {
	env := append([]string{}, s.o.Env...)
	for _, k := range slices.Sorted(maps.Keys(sb.envVars)) {
		env = append(env, k+"="+sb.envVars[k])
	}
	labels := map[string]string{labelSandbox: sb.id, labelTemplate: sb.template, labelToken: sb.token}
	if sb.traffic != "" {
		labels[labelTraffic] = sb.traffic
	}
	for k, v := range sb.metadata {
		labels[labelMeta+k] = v
	}
	img := ""
	if snapshot == "" {
		img = s.templates[sb.template]
	}
	return engine.Spec{Snapshot: snapshot, Image: img, Env: env, Egress: sb.network, EgressHosts: slices.Clone(sb.egressHosts), Mounts: s.o.Mounts, Labels: labels,
		Volumes: slices.Clone(sb.volumes)}
}
