// Package e2btest runs the local E2B server (e2bserver) on the real local engine for
// the tests of provider/e2b and e2bserver: a loopback listener, an isolated engine in
// a temp dir with sandbox-mcp bound in, and a shared read-only directory at /srv/shared
// inside every sandbox (git repos to clone, say). With Options.Image the sandboxes
// boot from the test image (imagetest.PlanImage) in the shared test image store instead of the engine's default
// root.
package e2btest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bserver"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// SharedDir is where Server.Shared appears inside every sandbox.
const SharedDir = "/srv/shared"

// APIKey is the API key of every test server.
const APIKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// Main runs a test binary's tests with *sandboxMCP set to a sandbox-mcp built for
// them (removed afterwards), then checks that no goroutine leaked; it exits.
func Main(m *testing.M, sandboxMCP *string) {
	local.MaybeRunInit()
	dir, err := os.MkdirTemp("", "e2b-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := testutil.BuildCommands(dir, "sandbox-mcp"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	*sandboxMCP = filepath.Join(dir, "sandbox-mcp")
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// Idle keep-alive connections of the tests' HTTP clients end on their own;
		// anything else still running (a server's read loop blocked in poll, say) is a
		// leak.
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// Server is a running local E2B server.
type Server struct {
	URL    string // control plane and envd
	Engine engine.Engine
	Server *e2bserver.Server
	// Shared is the host directory seen at SharedDir in every sandbox.
	Shared string
	// Image is the id of the image the "base" template boots (Options.Image); empty:
	// the engine's default root.
	Image string
}

// Options configure Start.
type Options struct {
	// SandboxMCP is the sandbox-mcp binary bound into the sandboxes; required.
	SandboxMCP string
	// Logger receives the server's and engine's logs; nil discards.
	Logger *slog.Logger
	// NoPause hides the engine's pause from the server (the real engine, with its
	// Capabilities saying it cannot pause), so the server pauses by snapshot and stop.
	NoPause bool
	// NoVolumes hides the engine's volumes from the server (Capabilities.Volumes false).
	NoVolumes bool
	// Egress lets sandboxes reach the outside through the engine's proxy.
	Egress bool
	// MaxUpload is the server's MaxUpload; zero means its default.
	MaxUpload int64
	// Image makes the "base" template the test image (imagetest.PlanImage), built on the shared test store's
	// Debian base (imagetest.Base: the test skips without root or mmdebstrap, and
	// fails without mmdebstrap under $CI). The snapshots the engine commits to the
	// store are removed when the test ends.
	Image bool
	// Templates are more templates of the server beside "base" (id → image; an empty
	// image is the engine's default root).
	Templates map[string]string
}

// noPause is the real engine with pause masked out of its capabilities.
type noPause struct{ engine.Engine }

func (n noPause) Capabilities() engine.Capabilities {
	c := n.Engine.Capabilities()
	c.Pause = false
	return c
}

// noVolumes is an engine with volumes masked out of its capabilities.
type noVolumes struct{ engine.Engine }

func (n noVolumes) Capabilities() engine.Capabilities {
	c := n.Engine.Capabilities()
	c.Volumes = false
	return c
}

// Start starts an engine and a server on 127.0.0.1; it skips the test when namespaces
// are not permitted here. Everything is stopped when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	eo := local.EngineOptions{DataDir: t.TempDir(), SandboxMCP: o.SandboxMCP, Logger: o.Logger}
	var images *snapshotStore
	if o.Image {
		s, _ := imagetest.Base(t)
		images = &snapshotStore{Store: s}
		eo.Images = images
	}
	eng, err := local.NewEngine(eo)
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	templates := maps.Clone(o.Templates)
	if templates == nil {
		templates = map[string]string{}
	}
	templates["base"] = ""
	if images != nil {
		// A build that fails ends the test here: close the engine first.
		func() {
			ok := false
			defer func() {
				if !ok {
					eng.Close()
				}
			}()
			templates["base"] = bootImage(t, eng)
			ok = true
		}()
	}
	shared := t.TempDir()
	var served engine.Engine = eng
	if o.NoPause {
		served = noPause{eng}
	}
	if o.NoVolumes {
		served = noVolumes{served}
	}
	srv, err := e2bserver.New(e2bserver.Options{Engine: served, APIKey: APIKey, Logger: o.Logger, Egress: o.Egress, MaxUpload: o.MaxUpload,
		Templates: templates, Mounts: []engine.Mount{{Source: shared, Target: SharedDir, ReadOnly: true}}})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		eng.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		// The sandboxes go with the test: terminate what the engine still runs.
		lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
		defer lcancel()
		if infos, err := eng.List(lctx); err == nil {
			for _, in := range infos {
				_ = eng.Terminate(lctx, in.ID)
			}
		}
		srv.Close()
		eng.Close()
		if images != nil {
			images.removeCommitted(t)
		}
	})
	return &Server{URL: "http://" + ln.Addr().String(), Engine: eng, Server: srv, Shared: shared, Image: templates["base"]}
}

// ClientOptions are the client settings that reach s with APIKey (sandbox hosts under
// the domain localhost).
func (s *Server) ClientOptions() e2b.ClientOptions {
	return e2b.ClientOptions{APIKey: APIKey, APIURL: s.URL, SandboxURL: s.URL, Domain: "localhost"}
}

// Client is a client of s with s.ClientOptions.
func (s *Server) Client(t testing.TB) *e2b.Client {
	t.Helper()
	c, err := e2b.NewClient(s.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
