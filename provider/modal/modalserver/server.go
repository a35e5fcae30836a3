// Package modalserver is a local server that speaks Modal's gRPC protocol — the
// control plane (modal.client.ModalClient) and the task command router
// (modal.task_command_router.TaskCommandRouter) on one plaintext listener — and runs
// the sandboxes on an engine.Engine. Modal's own SDKs (Go and JS) work against it
// with MODAL_SERVER_URL=http://127.0.0.1:PORT and the server's token pair (Options.Token).
//
// It implements the calls the SDKs make to create a sandbox from an image (with its
// own command and stdio), exec with streamed stdio and PTYs, use the filesystem, get
// tunnels, snapshot, list, tag, wait and terminate, Modal Volumes on an engine that
// has volumes, and image builds (RUN steps, Debian bases) with an ImageBuilder on an
// engine that boots images. What it cannot do locally it refuses with a message that
// starts "local Modal server:" and says what is missing: registry images it can
// neither build nor stand in for, build steps without a builder (RUN, …), GPUs, memory
// snapshots, and every call it does not serve. Output is bounded: an exec keeps at most a window of
// unread output, a sandbox's command a ring. See docs/modal.md.
package modalserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// DefaultHostImages are the registry images the host's userland stands in for on a
// server that does not build images (no Builder, an engine that boots no images, or
// SkipRunSteps): a sandbox created from one of them (with no build commands to run, or
// with SkipRunSteps) runs on the engine's default root with the programs the host has.
// A server that builds never stands in: it boots every registry image from the store.
var DefaultHostImages = []string{"debian:bookworm-slim", "debian:bookworm", "debian:12", "python:3.12-slim-bookworm"}

// Options configure a Server.
type Options struct {
	// Engine runs the sandboxes; required.
	Engine engine.Engine
	// HostImages are the registry tags accepted as "the host" when the server does not
	// build images; nil means DefaultHostImages.
	HostImages []string
	// Logger receives request errors; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// StateDir, when set, keeps the server's images (registry stand-ins and
	// snapshots) in StateDir/modal-images.json, so image ids outlive a restart.
	StateDir string
	// SkipRunSteps accepts image build steps the server cannot run (RUN, COPY, …)
	// without running them: the host's userland is taken to have what they install (the
	// provider's own base image on a host that has its packages). Off, they are refused.
	SkipRunSteps bool
	// Builder, on an engine that boots images (Capabilities().Images), builds every
	// registry image (a bare debian:bookworm-slim too: the store's base, with its ENV
	// and WORKDIR); their sandboxes boot from the built image, never from the engine's
	// default root. Nil keeps refusing images with commands to run (or accepting their
	// steps unrun with SkipRunSteps, which wins over Builder) and lets the host stand in
	// for HostImages.
	Builder ImageBuilder
	// Token is the one pair of MODAL_TOKEN_ID/MODAL_TOKEN_SECRET the server accepts;
	// zero means a random pair (see Server.Token; LoadOrCreateToken keeps one in a file).
	Token Token
}

// Server is the local Modal-compatible server. Its state (apps, images, secrets,
// exec processes) is in memory; sandboxes live in the engine and are found again
// through their labels after a restart.
type Server struct {
	pb.UnimplementedModalClientServer
	router routerServer

	o      Options
	log    *slog.Logger
	tokens *tokens
	tls    *tls.Config
	// guard closes connections that make no authenticated call (conns.go).
	guard *connGuard

	mu        sync.Mutex
	apps      map[string]*app        // by id
	images    map[string]*image      // by id
	builds    map[string]*imageBuild // by image id (Builder)
	secrets   map[string]*secret     // by id
	sandboxes map[string]*sandbox    // by Modal sandbox id
	tasks     map[string]string      // task id -> sandbox id
	tunnels   map[tunnelKey]*tunnel
	// finished are the ended sandboxes still remembered, oldest first (at most
	// maxFinished, a field so tests can lower it).
	finished    []*sandbox
	maxFinished int
	// uploads holds a token per WriteFile holding its data (concurrentUploads).
	uploads chan struct{}
	// volumeBeats: the ephemeral volumes' last heartbeats, by volume id.
	volumeBeats map[string]time.Time

	grpc *grpc.Server
	wg   sync.WaitGroup
	done chan struct{}
	// base is cancelled by Close; exec processes and tunnels run under it.
	base       context.Context
	cancelBase context.CancelFunc
}

type app struct {
	id, name, env string
	created       time.Time
}

type image struct {
	id string
	// Tag is the registry image the chain starts from; empty for a snapshot.
	tag string
	// Snapshot is the engine snapshot the image restores; empty for a registry image.
	snapshot string
	commands []string
	// built is the engine image (Spec.Image) the Builder made; empty when the
	// sandbox runs on the host's userland or a snapshot.
	built string
}

type secret struct {
	id  string
	env map[string]string
}

type sandbox struct {
	id, taskID, engineID string
	appID, name, imageID string
	workdir              string
	created              time.Time
	ports                []*pb.PortSpec
	tags                 map[string]string
	// result is set once the sandbox has ended; ended is closed then.
	result *pb.GenericResult
	ended  chan struct{}
	// deadline is when the sandbox's timeout ends it; zero when unknown.
	deadline time.Time
	// stdout and stderr are the entrypoint's streams (rings, so they stay bounded);
	// entry is the entrypoint, nil for a sandbox without a command. stdinIndex is the
	// last chunk index a V1 SandboxStdinWrite took.
	stdout, stderr *output
	entry          *process
	stdinIndex     uint32
	// ready, for a sandbox with a readiness probe, is closed once the probe passed
	// (at readyAt); nil without a probe.
	ready   chan struct{}
	readyAt time.Time

	execMu sync.Mutex
	execs  map[string]*process
}

// newSandbox fills a sandbox's channels, streams and maps.
func newSandbox(sb *sandbox) *sandbox {
	sb.ended = make(chan struct{})
	sb.stdout, sb.stderr = newOutput(stdioRing, true), newOutput(stdioRing, true)
	sb.tags, sb.execs = map[string]string{}, map[string]*process{}
	return sb
}

// Label keys the server keeps on engine sandboxes.
const (
	labelID    = "modal.sandbox_id"
	labelTask  = "modal.task_id"
	labelApp   = "modal.app_id"
	labelName  = "modal.name"
	labelImage = "modal.image_id"
	labelPorts = "modal.ports"
	// labelDeadline is the Unix time in ms at which the sandbox's timeout ends it.
	labelDeadline = "modal.deadline"
)

// EnvSkipRunSteps is the variable with which `sandboxctl serve --protocol modal` sets
// Options.SkipRunSteps ("1").
const EnvSkipRunSteps = provider.EnvSandboxctlModalSkipRunStep

// New returns a Server; call Serve to answer on a listener.
func New(o Options) (*Server, error) {
	if o.Engine == nil {
		return nil, errors.New("modalserver: Engine is required")
	}
	if o.HostImages == nil {
		o.HostImages = DefaultHostImages
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Token == (Token{}) {
		o.Token = NewToken()
	}
	if !o.Token.valid() {
		return nil, errors.New("modalserver: Token must be an ak-… id and an as-… secret")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg, err := selfSignedTLS()
	if err != nil {
		return nil, fmt.Errorf("modalserver: %w", err)
	}
	s := &Server{o: o, log: log, tokens: newTokens(time.Hour, o.Now), tls: cfg,
		apps: map[string]*app{}, images: map[string]*image{}, builds: map[string]*imageBuild{}, secrets: map[string]*secret{},
		sandboxes: map[string]*sandbox{}, tasks: map[string]string{}, tunnels: map[tunnelKey]*tunnel{},
		volumeBeats: map[string]time.Time{}, maxFinished: maxFinished, uploads: make(chan struct{}, concurrentUploads),
		done: make(chan struct{})}
	if err := s.loadImages(); err != nil {
		return nil, fmt.Errorf("modalserver: %w", err)
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.router.s = s
	s.guard = newConnGuard(preAuthTimeout, maxPreAuth)
	s.grpc = grpc.NewServer(
		grpc.Creds(guardCreds{s.guard}), grpc.ConnectionTimeout(preAuthTimeout),
		grpc.ChainUnaryInterceptor(s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamAuth),
		grpc.MaxRecvMsgSize(100<<20), grpc.MaxSendMsgSize(100<<20),
	)
	pb.RegisterModalClientServer(s.grpc, s)
	pb.RegisterTaskCommandRouterServer(s.grpc, &s.router)
	return s, nil
}

// Token is the token pair the server accepts.
func (s *Server) Token() Token { return s.o.Token }

// TLSConfig is the client side of the certificate the encrypted tunnels present
// (self-signed, generated at New): a client that trusts it reaches the tunnels' https
// URLs.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: s.tls.RootCAs, ServerName: "127.0.0.1"}
}

// Serve answers on l until Close. It returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	err := s.grpc.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Close stops the server, its tunnels and its exec processes (the engine's
// sandboxes keep running; the engine is not closed).
func (s *Server) Close() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	close(s.done)
	s.cancelBase()
	s.grpc.Stop()
	s.mu.Lock()
	ts := make([]*tunnel, 0, len(s.tunnels))
	for _, t := range s.tunnels {
		ts = append(ts, t)
	}
	s.tunnels = map[tunnelKey]*tunnel{}
	sbs := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		sbs = append(sbs, sb)
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.Close()
	}
	for _, sb := range sbs {
		sb.cancelExecs()
	}
	s.wg.Wait()
	return nil
}

// routerURL is where the SDK reaches the command router: this same listener, named
// as the client named it. The SDKs require https and, for a localhost server URL,
// dial it without TLS.
func routerURL(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	host := "127.0.0.1"
	if v := md.Get(":authority"); len(v) > 0 && v[0] != "" {
		host = v[0]
	} else if v := md.Get("x-modal-host"); len(v) > 0 && v[0] != "" {
		host = v[0]
	}
	return "https://" + host
}

// --- errors ---------------------------------------------------------------------------

// engineError maps an engine error to the status Modal answers with.
func engineError(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s not found", what)
	case errors.Is(err, engine.ErrNameTaken):
		return status.Errorf(codes.AlreadyExists, "%s: %v", what, err)
	case errors.Is(err, engine.ErrUnsupported), errors.Is(err, engine.ErrNotIsolated):
		return status.Errorf(codes.FailedPrecondition, "%s: %v (local Modal server)", what, err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// grpcError keeps a status error and turns a context's into its status.
func grpcError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.FromContextError(err).Err()
}

func localOnly(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, "local Modal server: "+format, args...)
}

func (s *Server) ctx() context.Context { return s.base }

func (s *Server) hostImage(tag string) bool { return slices.Contains(s.o.HostImages, tag) }
