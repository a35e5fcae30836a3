package main

import (
	"encoding/json"
	"fmt"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runImage runs sandboxctl with args and returns its stdout; a non-zero exit fails t.
func runImage(t *testing.T, getenv func(string) string, args ...string) string {
	t.Helper()
	var stdout, stderr strings.Builder
	if code := run(t.Context(), args, getenv, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("sandboxctl %s = %d, stderr:\n%s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

func TestImageDockerfileIsDeployDockerfile(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("..", "..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if got := runImage(t, os.Getenv, "image", "dockerfile"); got != string(want) {
		t.Errorf("sandboxctl image dockerfile differs from deploy/Dockerfile (run go test ./deploy -update)")
	}
	e2b := runImage(t, os.Getenv, "image", "dockerfile", "--e2b")
	if !strings.Contains(e2b, "COPY dist/linux_amd64/sandbox-mcp") || strings.Contains(e2b, "\nCMD ") {
		t.Errorf("image dockerfile --e2b:\n%s", e2b)
	}
}

func TestImageDockerfileFromFile(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "image.json")
	if err := os.WriteFile(def, []byte(`{"from":"debian:bookworm","steps":[{"kind":"run","commands":["echo hi"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := runImage(t, os.Getenv, "image", "dockerfile", "-f", def), "FROM debian:bookworm\n\nRUN echo hi\n"; got != want {
		t.Errorf("image dockerfile -f = %q, want %q", got, want)
	}
	if err := os.WriteFile(def, []byte(`{"from":"debian:bookworm","steps":[{"kind":"run"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	if code := run(t.Context(), []string{"image", "dockerfile", "-f", def}, os.Getenv, strings.NewReader(""), &stdout, &stderr); code != 2 {
		t.Errorf("image dockerfile -f invalid = %d, want 2; stderr %q", code, stderr.String())
	}
}

// TestImageBuildListRm: build twice (the second does no work, same id), change a
// step (only it and later rebuild), list, rm. It uses the shared test base.
func TestImageBuildListRm(t *testing.T) {
	t.Parallel()
	imagetest.Base(t)
	data := t.TempDir()
	if err := os.Symlink(filepath.Join(imagetest.Dir(), "store"), filepath.Join(data, "images")); err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	// The shared store outlives this test: content unique to this run keeps its keys
	// out of earlier runs' cache.
	os.WriteFile(filepath.Join(ctxDir, "hello.txt"), []byte(ctxDir), 0o644)
	name := "sandboxctl-test:" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + filepath.Base(ctxDir)
	def := func(greeting string) string {
		p := filepath.Join(ctxDir, "image.json")
		os.WriteFile(p, []byte(`{"from":"debian:bookworm-slim","steps":[
			{"kind":"copy","src":"hello.txt","dst":"/opt/hello.txt"},
			{"kind":"env","env":[{"key":"GREETING","value":"`+greeting+`"}]},
			{"kind":"workdir","path":"/opt"},
			{"kind":"run","commands":["echo $GREETING > ran"]}]}`), 0o644)
		return p
	}
	getenv := func(k string) string {
		if k == "SANDBOXCTL_DATA_DIR" {
			return data
		}
		return os.Getenv(k)
	}
	buildJSON := func(greeting string) (res struct {
		ID    string
		Steps []struct {
			ID     string
			Cached bool
		}
	}) {
		t.Helper()
		out := runImage(t, getenv, "image", "build", "--json", "-f", def(greeting), "--context", ctxDir, "--tag", name)
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("image build --json: %v\n%s", err, out)
		}
		return res
	}
	first := buildJSON("hi")
	second := buildJSON("hi")
	if second.ID != first.ID {
		t.Errorf("second build = %s, want %s", second.ID, first.ID)
	}
	for i, s := range second.Steps {
		if !s.Cached {
			t.Errorf("second build: step %d was not cached", i)
		}
	}
	changed := buildJSON("hello")
	var cached []bool
	for _, s := range changed.Steps {
		cached = append(cached, s.Cached)
	}
	if want := []bool{true, true, false, false, false}; fmt.Sprint(cached) != fmt.Sprint(want) {
		t.Errorf("after changing the env step, cached = %v, want %v", cached, want)
	}
	// The run step ran in a build sandbox of the local engine, in the workdir, with the env.
	fs, err := imagetest.Store(t).ResolveImage(t.Context(), changed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(fs.Layers[len(fs.Layers)-1], "opt/ran")); err != nil || string(b) != "hello\n" {
		t.Errorf("the run step's layer opt/ran = %q, %v", b, err)
	}
	if list := runImage(t, getenv, "image", "list"); !strings.Contains(list, changed.ID[:12]) || !strings.Contains(list, name) {
		t.Errorf("image list lacks %s %s:\n%s", changed.ID[:12], name, list)
	}
	// The copy step's image is shared by both builds: the parent of both env steps.
	var stdout, stderr strings.Builder
	if code := run(t.Context(), []string{"image", "rm", changed.Steps[1].ID}, getenv, strings.NewReader(""), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "parent of") {
		t.Errorf("image rm of a parent = %d, %q; want refused", code, stderr.String())
	}
	// A live sandbox booted from the image holds it.
	e, err := local.NewEngine(local.EngineOptions{DataDir: data, Images: imagetest.Store(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	box, err := e.Create(t.Context(), engine.Spec{Image: name})
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(t.Context(), []string{"image", "rm", name}, getenv, strings.NewReader(""), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), box.ID) {
		t.Errorf("image rm of an image a live sandbox uses = %d, %q; want refused naming %s", code, stderr.String(), box.ID)
	}
	if err := e.Terminate(t.Context(), box.ID); err != nil {
		t.Fatal(err)
	}
	runImage(t, getenv, "image", "rm", name)
	if out := runImage(t, getenv, "image", "rm", first.ID); strings.Count(out, "removed") != 4 {
		t.Errorf("image rm of the first build removed:\n%s\nwant it and its workdir, env and copy step images (4 ids; the base is tagged)", out)
	}
	if list := runImage(t, getenv, "image", "list"); strings.Contains(list, changed.ID[:12]) {
		t.Errorf("image list still has %s after rm:\n%s", changed.ID[:12], list)
	}
}
