package modalserver

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestRegistryImageBootsFromStore: on a server with a Builder, a registry image with
// nothing to run (a bare debian:bookworm-slim, or one with only ENV and WORKDIR, a tag
// the host used to stand in for) boots from the store's image, never from the engine's
// default root: the sandbox's dpkg status is the image's. The same tag on a server
// without a Builder is the stand-in, and its log says so.
func TestRegistryImageBootsFromStore(t *testing.T) {
	eng, b, remove := imageEngine(t)
	_, base := imagetest.Base(t)
	srv, c, app := serveBuilder(t, eng, b)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name    string
		cmds    []string
		wantOut string
	}{
		{"bare", nil, "\n" + rules.HomeDir + "\n"}, // the engine's default working directory
		{"env and workdir", []string{"ENV GREETING=hi", "WORKDIR /srv/app"}, "hi\n/srv/app\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := c.Images.FromRegistry(imagetest.BaseRef, nil)
			if tc.cmds != nil {
				img = img.DockerfileCommands(tc.cmds, nil)
			}
			sb, err := c.Sandboxes.Create(ctx, app, img, nil)
			if err != nil {
				t.Fatalf("Create from %s %q: %v", imagetest.BaseRef, tc.cmds, err)
			}
			defer sb.Terminate(context.Background(), nil)
			built := builtID(t, srv, sb)
			if built != base {
				remove(built) // a configuration-only image on the shared base
			}
			if tc.cmds == nil && built != base {
				t.Errorf("bare %s built %s, want the store's base %s", imagetest.BaseRef, built, base)
			}
			out, errOut, code := execOut(t, ctx, sb, []string{"sh", "-c", modaltest.RootMarkerScript}, nil)
			if code != 0 {
				t.Fatalf("%s = %d (stderr %q)", modaltest.RootMarkerScript, code, errOut)
			}
			modaltest.CheckImageRoot(t, b.Store, built, out)
			if out, errOut, code := execOut(t, ctx, sb, []string{"sh", "-c", "echo $GREETING; pwd"}, nil); out != tc.wantOut || code != 0 {
				t.Errorf("echo $GREETING; pwd = %q (stderr %q), %d; want %q", out, errOut, code, tc.wantOut)
			}
		})
	}

	t.Run("no builder: the host stands in", func(t *testing.T) {
		var logs testutil.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		_, c, app := serveWith(t, Options{Engine: eng, Logger: log})
		sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry(imagetest.BaseRef, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Terminate(context.Background(), nil)
		out, _, _ := execOut(t, ctx, sb, []string{"sh", "-c", modaltest.RootMarkerScript}, nil)
		if got, _, _ := strings.Cut(out, " "); got == modaltest.ImageFileSum(t, b.Store, base, modaltest.RootMarker) {
			t.Errorf("without a Builder the sandbox runs on the image's root: the stand-in check above proves nothing")
		}
		if l := logs.String(); !strings.Contains(l, "not booted from an image") || !strings.Contains(l, "default root") {
			t.Errorf("the server's log does not say the host stands in:\n%s", l)
		}
	})
}

// TestStandInNotKeptByBuilder: a stand-in image kept in the state dir by a server
// without a Builder is not loaded by one with a Builder (images.fromId finds nothing),
// so no sandbox of it boots the engine's default root; snapshots and built images are
// loaded as before.
func TestStandInNotKeptByBuilder(t *testing.T) {
	s, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	eng := modaltest.Engine(t, local.EngineOptions{Images: s})
	state := t.TempDir()
	recs := `[{"id":"im-standin","tag":"debian:bookworm-slim"},{"id":"im-built","tag":"debian:bookworm-slim","commands":["RUN true"],"built":"abc"},{"id":"im-snap","snapshot":"def"}]`
	if err := os.WriteFile(filepath.Join(state, imagesFile), []byte(recs), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want []string
	}{
		{"without a builder", Options{Engine: eng, StateDir: state}, []string{"im-built", "im-snap", "im-standin"}},
		{"with a builder", Options{Engine: eng, StateDir: state, Builder: StoreBuilder{Store: s}}, []string{"im-built", "im-snap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Token = testToken
			srv, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			got := slices.Sorted(maps.Keys(srv.images))
			if !slices.Equal(got, tc.want) {
				t.Errorf("loaded images %q, want %q", got, tc.want)
			}
		})
	}
}
