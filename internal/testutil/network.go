package testutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"
)

// ReachTimeout bounds a reachability probe. A test that needs the network (the npm
// registry, the Debian mirror) probes first, so without it the test fails within a
// minute naming what it could not reach, rather than waiting out a package manager's
// own retries.
const ReachTimeout = 30 * time.Second

// NPMInstallTimeout bounds one npm install of the test cache, once the registry
// has answered.
const NPMInstallTimeout = 5 * time.Minute

// RequireReachable fails the test, within ReachTimeout, when rawURL does not answer
// an HTTP HEAD (through the proxy the environment names, as package managers do). The
// message names the URL's host and need, what the test wanted it for ("npm install
// deno@2.9.6"). Any answer below 500 counts: the host is there.
func RequireReachable(t testing.TB, rawURL, need string) {
	t.Helper()
	if err := Reach(t.Context(), rawURL, ReachTimeout); err != nil {
		t.Fatalf("%s needs the network: %v", need, err)
	}
}

// Reach asks rawURL for an HTTP answer within timeout; its error names the host and
// says what to check.
func Reach(ctx context.Context, rawURL string, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("probe %q: not a URL with a host", rawURL)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, rawURL, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", u.Host, err)
	}
	// A transport of its own without keep-alives: nothing of the probe outlives it
	// (packages check for leaked goroutines).
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%s did not answer within %v (%s); check the network or the proxy variables", u.Host, timeout, rawURL)
		}
		return fmt.Errorf("%s is unreachable (%s); check the network or the proxy variables: %w", u.Host, rawURL, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("%s answered %s (%s); try again later", u.Host, resp.Status, rawURL)
	}
	return nil
}

// NPMRegistry returns the registry npm installs from (npm config get registry, which
// honours .npmrc and $npm_config_registry).
func NPMRegistry(ctx context.Context, npm string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ReachTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "config", "get", "registry").Output()
	if err != nil {
		return "", fmt.Errorf("npm config get registry: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RequireNPMRegistry fails the test, within a minute, when the registry npm installs
// from does not answer; need says what the test fetches from it. Without npm the test
// is skipped, or fails under $CI.
func RequireNPMRegistry(t testing.TB, need string) {
	t.Helper()
	npm := NeedCommand(t, "npm", need)
	registry, err := NPMRegistry(t.Context(), npm)
	if err != nil {
		t.Fatalf("%s: %v", need, err)
	}
	RequireReachable(t, registry, need)
}

// NPMPackages returns filepath.Join(dir, want), where dir is the test cache folder
// <user cache dir>/sandbox-mcp-test/<name>-<hash of specs>, kept between runs: the
// first time, it installs specs ("deno@2.9.6") there with npm. The folder is keyed by
// the specs, so a test that changes a version gets it rather than the old install. Test processes that ask at once wait
// for one install (a file lock). Before installing it probes the registry, so
// without the network the test fails within a minute naming the registry. Without
// npm the test is skipped, or fails under $CI.
func NPMPackages(t testing.TB, name, want string, specs ...string) string {
	t.Helper()
	npm := NeedCommand(t, "npm", "npm install "+strings.Join(specs, " "))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	path, err := npmPackages(t.Context(), npm, npmCacheDir(cache, name, specs), want, specs)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// npmCacheDir is the folder of the test cache, under the user cache dir cache, that
// holds the npm packages specs installed for name.
func npmCacheDir(cache, name string, specs []string) string {
	sum := sha256.Sum256([]byte(strings.Join(specs, "\n")))
	return filepath.Join(cache, "sandbox-mcp-test", name+"-"+hex.EncodeToString(sum[:6]))
}

func npmPackages(ctx context.Context, npm, dir, want string, specs []string) (string, error) {
	path := filepath.Join(dir, want)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	unlock, err := lockedfile.MutexAt(dir + ".lock").Lock()
	if err != nil {
		return "", fmt.Errorf("lock the npm test cache %s: %w", dir, err)
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil // another test process installed it while this one waited
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private":true}`), 0o644); err != nil {
		return "", err
	}
	what := "npm install " + strings.Join(specs, " ")
	registry, err := NPMRegistry(ctx, npm)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if err := Reach(ctx, registry, ReachTimeout); err != nil {
		return "", fmt.Errorf("%s needs the npm registry: %w", what, err)
	}
	ctx, cancel := context.WithTimeout(ctx, NPMInstallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, append([]string{"install", "--no-audit", "--no-fund", "--no-save"}, specs...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s (registry %s): %w\n%s", what, registry, err, out)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s installed no %s: %w", what, want, err)
	}
	return path, nil
}

// NeedCommand returns the path of the command name on PATH. Without it the test is
// skipped, or fails under $CI (which installs every tool the tests use); why says
// what the test runs it for.
func NeedCommand(t testing.TB, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required in CI (%s): %v", name, why, err)
	}
	t.Skipf("%s is not installed (%s): %v", name, why, err)
	return ""
}
