package main

import (
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
