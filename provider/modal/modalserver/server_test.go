package modalserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// startServer serves a Server on a loopback port and returns its URL. On an image
// engine (bootEngine) the server has a builder, so its sandboxes boot from images.
func startServer(t testing.TB, eng engine.Engine) (string, *Server) {
	t.Helper()
	o := Options{Engine: eng}
	if ie, ok := eng.(*modaltest.ImageEngine); ok {
		o.Builder = StoreBuilder{Store: ie.Store, Runner: ie.Runner()}
	}
	return startServerWith(t, o)
}

// bootEngine is the engine of the tests whose sandboxes boot from images: the local
// engine on the shared test image store (modaltest.NewImageEngine).
func bootEngine(t testing.TB) *modaltest.ImageEngine {
	return modaltest.NewImageEngine(t, local.EngineOptions{})
}

// startServerWith is startServer with o, its Token and Logger the tests'.
func startServerWith(t testing.TB, o Options) (string, *Server) {
	t.Helper()
	o.Token, o.Logger = testToken, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return modaltest.Serve(t, srv), srv
}

// testWriter sends the server's warnings to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// testToken is the pair the tests' servers accept.
var testToken = Token{ID: "ak-localtest", Secret: "as-localtest"}

// sdkEnv points Modal's Go SDK at url with a well-shaped token pair and no config
// file. v2 selects the SDK's V2 sandbox calls (its default) or the V1 ones.
func sdkEnv(t testing.TB, url string, v2 bool) {
	modaltest.PointSDK(t, url)
	t.Setenv("MODAL_TOKEN_ID", testToken.ID)
	t.Setenv("MODAL_TOKEN_SECRET", testToken.Secret)
	t.Setenv("MODAL_SANDBOX_V2", fmt.Sprint(v2))
}

func newSDK(t testing.TB) *modal.Client {
	t.Helper()
	c, err := modal.NewClientWithOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func execOut(t *testing.T, ctx context.Context, sb *modal.Sandbox, argv []string, p *modal.SandboxExecParams) (string, string, int) {
	t.Helper()
	proc, err := sb.Exec(ctx, argv, p)
	if err != nil {
		t.Fatalf("Exec %q: %v", argv, err)
	}
	out, err := io.ReadAll(proc.Stdout)
	if err != nil {
		t.Fatalf("stdout of %q: %v", argv, err)
	}
	errOut, err := io.ReadAll(proc.Stderr)
	if err != nil {
		t.Fatalf("stderr of %q: %v", argv, err)
	}
	code, err := proc.Wait(ctx, nil)
	if err != nil {
		t.Fatalf("Wait %q: %v", argv, err)
	}
	return string(out), string(errOut), code
}

// TestGoSDK drives the server with Modal's own Go SDK, through both its V1 and V2
// sandbox calls.
func TestGoSDK(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			// On image-booted sandboxes: the server builds debian:bookworm-slim (the
			// store's base, with the image's ENV and WORKDIR).
			eng, b, _ := imageEngine(t)
			url, srv := startServerWith(t, Options{Engine: eng, Builder: b})
			sdkEnv(t, url, v2)
			testSDKLifecycle(t, newSDK(t), srv, eng.Engine)
		})
	}
}

// tunnelPort is the port of the HTTP server inside a test's sandbox (each sandbox has
// its own network, so any free port of it would do).
const tunnelPort = 8000

func testSDKLifecycle(t *testing.T, c *modal.Client, srv *Server, eng *local.Engine) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "sdk-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatalf("Apps.FromName: %v", err)
	}
	if _, err := c.Apps.FromName(ctx, "never-created", nil); err == nil {
		t.Errorf("Apps.FromName of a missing app without CreateIfMissing succeeded")
	}

	img := c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands([]string{"ENV FROM_IMAGE=img GREETING=overridden", "WORKDIR /home/user/wd"}, nil)
	sb, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Name: "box-1", EncryptedPorts: []int{tunnelPort},
		Env: map[string]string{"GREETING": "hi"}, Tags: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatalf("Sandboxes.Create: %v", err)
	}
	if !strings.HasPrefix(sb.SandboxID, "sb-") {
		t.Errorf("sandbox id %q does not have Modal's shape", sb.SandboxID)
	}
	if _, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Name: "box-1"}); err == nil {
		t.Errorf("a second running sandbox named box-1 was created")
	}
	if b, ok := srv.o.Builder.(StoreBuilder); ok {
		// The sandbox runs on the built image's root, not the engine's default root.
		out, _, _ := execOut(t, ctx, sb, []string{"sh", "-c", modaltest.RootMarkerScript}, nil)
		modaltest.CheckImageRoot(t, b.Store, builtID(t, srv, sb), out)
	}

	out, errOut, code := execOut(t, ctx, sb, []string{"sh", "-c", "echo $GREETING $EXTRA $FROM_IMAGE $PWD; echo oops >&2; exit 3"},
		&modal.SandboxExecParams{Env: map[string]string{"EXTRA": "there"}})
	if want := "hi there img /home/user/wd\n"; out != want || errOut != "oops\n" || code != 3 {
		t.Errorf("exec = %q, %q, %d; want %q, %q, 3", out, errOut, code, want, "oops\n")
	}

	proc, err := sb.Exec(ctx, []string{"cat"}, nil)
	if err != nil {
		t.Fatalf("Exec cat: %v", err)
	}
	io.WriteString(proc.Stdin, "through stdin")
	proc.Stdin.Close()
	got, _ := io.ReadAll(proc.Stdout)
	if string(got) != "through stdin" {
		t.Errorf("cat echoed %q", got)
	}

	if err := sb.Filesystem.WriteText(ctx, "written by the sdk\n", "/home/user/dir/note.txt", nil); err != nil {
		t.Fatalf("WriteText: %v", err)
	}
	text, err := sb.Filesystem.ReadText(ctx, "/home/user/dir/note.txt", nil)
	if err != nil || text != "written by the sdk\n" {
		t.Errorf("ReadText = %q, %v", text, err)
	}
	files, err := sb.Filesystem.ListFiles(ctx, "/home/user/dir", nil)
	if err != nil || len(files) != 1 || files[0].Name != "note.txt" || files[0].Type != modal.FileTypeFile {
		t.Errorf("ListFiles = %+v, %v", files, err)
	}
	if _, err := sb.Filesystem.ReadText(ctx, "/home/user/missing", nil); err == nil {
		t.Errorf("ReadText of a missing file succeeded")
	} else if _, ok := err.(modal.SandboxFilesystemNotFoundError); !ok {
		t.Errorf("ReadText of a missing file = %T %v, want SandboxFilesystemNotFoundError", err, err)
	}
	if err := sb.Filesystem.Remove(ctx, "/home/user/dir", nil); err == nil {
		t.Errorf("non-recursive Remove of a non-empty dir succeeded")
	}
	if err := sb.Filesystem.Remove(ctx, "/home/user/dir", &modal.SandboxFilesystemRemoveParams{Recursive: true}); err != nil {
		t.Errorf("Remove: %v", err)
	}

	// A server inside the sandbox, on its own network, reached through the tunnel.
	rec, err := srv.lookup(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	eid := rec.engineID
	srv.mu.Unlock()
	modaltest.ServeHTTP(t, eng, eid, tunnelPort, "hello through the tunnel")
	port := tunnelPort
	tunnels, err := sb.Tunnels(ctx, 10*time.Second, nil)
	if err != nil || tunnels[port] == nil {
		t.Fatalf("Tunnels = %v, %v", tunnels, err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: srv.TLSConfig()}, Timeout: 10 * time.Second}
	resp, err := hc.Get(tunnels[port].URL())
	if err != nil {
		t.Fatalf("GET %s: %v", tunnels[port].URL(), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello through the tunnel" {
		t.Errorf("tunnel answered %q", body)
	}
	if _, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}).Get(tunnels[port].URL()); err == nil {
		t.Errorf("the tunnel's certificate was trusted without the server's CA")
	}

	// Snapshot, then a new sandbox from the snapshot image has the file.
	if err := sb.Filesystem.WriteText(ctx, "kept", "/home/user/kept.txt", nil); err != nil {
		t.Fatal(err)
	}
	snap, err := sb.SnapshotFilesystem(ctx, nil)
	if err != nil {
		t.Fatalf("SnapshotFilesystem: %v", err)
	}
	snapImg, err := c.Images.FromID(ctx, snap.ImageID, nil)
	if err != nil {
		t.Fatalf("Images.FromID(%s): %v", snap.ImageID, err)
	}
	sb2, err := c.Sandboxes.Create(ctx, app, snapImg, nil)
	if err != nil {
		t.Fatalf("Create from snapshot: %v", err)
	}
	if text, err := sb2.Filesystem.ReadText(ctx, "/home/user/kept.txt", nil); err != nil || text != "kept" {
		t.Errorf("restored file = %q, %v", text, err)
	}

	ids := func() []string {
		seq, err := c.Sandboxes.List(ctx, &modal.SandboxListParams{AppID: app.AppID})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		var out []string
		for s, err := range seq {
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			out = append(out, s.SandboxID)
		}
		return out
	}
	if got := ids(); !slices.Contains(got, sb.SandboxID) || !slices.Contains(got, sb2.SandboxID) {
		t.Errorf("List = %v, want %s and %s", got, sb.SandboxID, sb2.SandboxID)
	}
	byName, err := c.Sandboxes.FromName(ctx, "sdk-test", "box-1", nil)
	if err != nil || byName.SandboxID != sb.SandboxID {
		t.Errorf("FromName = %v, %v, want %s", byName, err, sb.SandboxID)
	}
	tags, err := sb.GetTags(ctx, nil)
	if err != nil || tags["k"] != "v" {
		t.Errorf("GetTags = %v, %v", tags, err)
	}

	if _, err := sb.Terminate(ctx, nil); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if _, err := sb.Wait(ctx, nil); err != nil {
		t.Errorf("Wait after Terminate: %v", err)
	}
	if got := ids(); slices.Contains(got, sb.SandboxID) {
		t.Errorf("List after Terminate still has %s", sb.SandboxID)
	}
	if _, err := c.Sandboxes.FromName(ctx, "sdk-test", "box-1", nil); err == nil {
		t.Errorf("FromName found a terminated sandbox")
	}
	if _, err := sb.Exec(ctx, []string{"true"}, nil); err == nil {
		t.Errorf("Exec in a terminated sandbox succeeded")
	}
	if _, err := sb2.Terminate(ctx, nil); err != nil {
		t.Errorf("Terminate sb2: %v", err)
	}
}

// TestRegistryImageRefused: an image the engine cannot stand in for is refused the
// way Modal refuses a failed build, and the message says what is local-only.
func TestRegistryImageRefused(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	url, _ := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "refuse", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("nvidia/cuda:12.4.0-runtime-ubuntu22.04", nil), nil)
	if err == nil || !strings.Contains(err.Error(), "local Modal server") || !strings.Contains(err.Error(), "nvidia/cuda") {
		t.Errorf("Create from an unpullable image = %v, want a local-only refusal naming the image", err)
	}
}

// TestExecRecordsForgotten: once a client has both streams to EOF and the exit code,
// the server drops the exec and the output it kept.
func TestExecRecordsForgotten(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	url, srv := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "forget", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background(), nil)
	for range 3 {
		if out, _, code := execOut(t, ctx, sb, []string{"echo", "x"}, nil); out != "x\n" || code != 0 {
			t.Fatalf("exec = %q, %d", out, code)
		}
	}
	rec, err := srv.lookup(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	rec.execMu.Lock()
	n := len(rec.execs)
	rec.execMu.Unlock()
	if n != 0 {
		t.Errorf("%d exec records kept after their output and exit codes were taken", n)
	}
}

// TestRunStepsRefused: an image with a RUN step is refused with the reason (the local
// engine has no builder) unless the server was told to accept such steps unrun.
func TestRunStepsRefused(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	for _, skip := range []bool{false, true} {
		srv, err := New(Options{Engine: eng, Token: testToken, SkipRunSteps: skip})
		if err != nil {
			t.Fatal(err)
		}
		sdkEnv(t, modaltest.Serve(t, srv), true)
		c := newSDK(t)
		app, err := c.Apps.FromName(t.Context(), "run", &modal.AppFromNameParams{CreateIfMissing: true})
		if err != nil {
			t.Fatal(err)
		}
		img := c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands([]string{"RUN touch /made-by-run"}, nil)
		sb, err := c.Sandboxes.Create(t.Context(), app, img, nil)
		if !skip {
			if err == nil || !strings.Contains(err.Error(), "local Modal server: cannot run the image's build step \"RUN touch /made-by-run\"") ||
				!strings.Contains(err.Error(), "no image builder") {
				t.Errorf("Create with a RUN step = %v, want the local server's refusal with its reason", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Create with a RUN step and SkipRunSteps: %v", err)
		}
		sb.Terminate(t.Context(), nil)
	}
}
