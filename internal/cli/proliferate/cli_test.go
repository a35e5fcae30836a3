package proliferate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/internal/version"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sandboxMCPBin.dir != "" {
		_ = os.RemoveAll(sandboxMCPBin.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// result is what one CLI run produced.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the real entry point with env as the whole environment; tweak may
// shorten the factory's delays.
func cli(t testing.TB, ctx context.Context, env map[string]string, tweak func(*Factory), args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string { return env[k] }
	var code int
	if tweak == nil {
		code = run(ctx, args, getenv, strings.NewReader(""), &out, &errOut)
	} else {
		f := newFactory(getenv, strings.NewReader(""), &out, &errOut)
		tweak(f)
		code = execute(ctx, f, args)
	}
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// fast shortens every delay so failures surface quickly.
func fast(f *Factory) {
	f.RetryDelay = 10 * time.Millisecond
	f.ActionPoll = 10 * time.Millisecond
	f.ServicePoll = 10 * time.Millisecond
}

// sidecarEnv is the environment that points the CLI at url with token.
func sidecarEnv(url, token string) map[string]string {
	return map[string]string{"PROLIFERATE_SANDBOX_MCP_URL": url, "SANDBOX_MCP_AUTH_TOKEN": token}
}

// closedURL is a loopback URL where nothing listens.
func closedURL(t testing.TB) string {
	return "http://127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
}

func TestUsageAndExitCodes(t *testing.T) {
	sidecar := sidecarEnv(closedURL(t), "tok")
	gateway := map[string]string{"PROLIFERATE_GATEWAY_URL": "http://127.0.0.1:1", "PROLIFERATE_SESSION_ID": "s1", "SANDBOX_MCP_AUTH_TOKEN": "tok"}
	noTokenGateway := map[string]string{"PROLIFERATE_GATEWAY_URL": "http://127.0.0.1:1", "PROLIFERATE_SESSION_ID": "s1"}
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stderr string // exact; "prefix:" compares a prefix
	}{
		{"no command", nil, nil, 2, `Error: missing command for "proliferate"; run 'proliferate --help'`},
		{"unknown command", nil, []string{"nope"}, 2, `Error: unknown command "nope" for "proliferate"`},
		{"unknown subcommand", sidecar, []string{"services", "lst"}, 2, `Error: unknown command "lst" for "proliferate services"; did you mean "list"?`},
		{"unknown flag", sidecar, []string{"services", "list", "--bogus"}, 2, "Error: unknown flag: --bogus"},
		{"extra argument", sidecar, []string{"services", "list", "x"}, 2, `Error: unexpected argument "x" for "proliferate services list"`},
		{"no token", map[string]string{}, []string{"services", "list"}, 2, "Error: " + errNoToken},
		// A server-only variable the CLI does not read must not fail it.
		{"no token, bad server setting", map[string]string{"SANDBOX_MCP_MAX_TERMINALS": "abc"}, []string{"services", "list"}, 2, "Error: " + errNoToken},
		{"actions no gateway, bad server setting", map[string]string{"SANDBOX_MCP_MAX_TERMINALS": "abc"}, []string{"actions", "list"}, 1, "Error: Actions require PROLIFERATE_GATEWAY_URL and PROLIFERATE_SESSION_ID"},
		{"start no name", sidecar, []string{"services", "start", "--command", "x"}, 2, "Error: Missing required flag: --name"},
		{"start empty name", sidecar, []string{"services", "start", "--name=", "--command", "x"}, 2, "Error: Missing required flag: --name"},
		{"start no command", sidecar, []string{"services", "start", "--name", "x"}, 2, "Error: Missing required flag: --command"},
		{"start bad restart", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--restart", "sometimes"}, 2, "Error: --restart must be 'no', 'on-failure' or 'always'"},
		{"start bad env", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--env", "NOEQ"}, 2, `Error: --env must be KEY=VALUE, got "NOEQ"`},
		{"start two probes", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--ready-tcp", "3000", "--ready-log", "up"}, 2, "Error: only one of --ready-tcp, --ready-http and --ready-log may be given"},
		{"start bad tcp", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--ready-tcp", "0"}, 2, "Error: --ready-tcp must be a port number (1-65535)"},
		{"start bad http", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--ready-http", "localhost:3000"}, 2, "Error: --ready-http must be an http:// or https:// URL"},
		{"start bad regex", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--ready-log", "("}, 2, "Error: --ready-log must be a regular expression"},
		{"start timeout without probe", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--ready-timeout", "5s"}, 2, "Error: --ready-timeout needs --ready-tcp, --ready-http or --ready-log"},
		{"start bad signal", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--stop-signal", "KILL"}, 2, "Error: --stop-signal must be one of SIGTERM, SIGINT, SIGHUP, SIGQUIT"},
		{"start bad duration", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--stop-timeout", "soon"}, 2, `prefix:Error: invalid argument "soon" for "--stop-timeout" flag`},
		{"settle without wait", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--settle", "2s"}, 2, "Error: --settle and --stop-on-timeout need --wait"},
		{"stop on timeout without wait", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--stop-on-timeout"}, 2, "Error: --settle and --stop-on-timeout need --wait"},
		{"settle with a probe", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--ready-tcp", "80", "--wait", "--settle", "2s"}, 2, "Error: --settle applies only without --ready-tcp, --ready-http or --ready-log"},
		{"negative settle", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--wait", "--settle", "-1s"}, 2, "Error: --settle must not be negative"},
		{"start negative max restarts", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--max-restarts", "-1"}, 2, "Error: --max-restarts must be a non-negative integer"},
		{"start max restarts over", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--max-restarts", "1001"}, 2, "Error: --max-restarts: maxRestarts must be from 0 to 1000, got 1001"},
		{"start stop timeout over", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--stop-timeout", "6m"}, 2, "Error: --stop-timeout: stopTimeoutMs must be from 0 to 300000 (5 minutes), got 360000"},
		{"start ready timeout over", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--ready-tcp", "80", "--ready-timeout", "2h"}, 2, "Error: --ready-timeout: readiness.timeoutMs must be from 1 to 3600000 (1 hour), got 7200000"},
		{"start command too long", sidecar, []string{"services", "start", "--name", "a", "--command", strings.Repeat("x", 65537)}, 2, "Error: --command: command is 65537 bytes long; the limit is 65536 bytes (64 KiB)"},
		{"start env too big", sidecar, []string{"services", "start", "--name", "a", "--command", "x", "--env", "K=" + strings.Repeat("v", 65536)}, 2, "Error: --env: env holds 65537 bytes of keys and values; the limit is 65536 bytes (64 KiB)"},
		{"stop no name", sidecar, []string{"services", "stop"}, 2, "Error: Missing required flag: --name"},
		{"stop name without value", sidecar, []string{"services", "stop", "--name"}, 2, "Error: Missing required flag: --name"},
		{"start command without value", sidecar, []string{"services", "start", "--name", "x", "--command"}, 2, "Error: Missing required flag: --command"},
		{"expose port without value", sidecar, []string{"services", "expose", "--port"}, 2, "Error: Missing required flag: --port"},
		{"env spec without value", nil, []string{"env", "apply", "--spec"}, 2, "Error: Missing required flag: --spec"},
		{"grant action without value", gateway, []string{"actions", "grant", "request", "--integration", "i", "--action"}, 2, "Error: Missing required flag: --action"},
		{"restart no name", sidecar, []string{"services", "restart"}, 2, "Error: Missing required flag: --name"},
		{"wait no name", sidecar, []string{"services", "wait"}, 2, "Error: Missing required flag: --name"},
		{"logs no name", sidecar, []string{"services", "logs"}, 2, "Error: Missing required flag: --name"},
		{"logs bad tail", sidecar, []string{"services", "logs", "--name", "a", "--tail", "0"}, 2, "Error: --tail must be a positive integer"},
		{"expose no port", sidecar, []string{"services", "expose"}, 2, "Error: Missing required flag: --port"},
		{"expose word", sidecar, []string{"services", "expose", "--port", "abc"}, 2, "Error: --port must be a positive number"},
		{"expose zero", sidecar, []string{"services", "expose", "--port=0"}, 2, "Error: --port must be a positive number"},
		{"expose negative", sidecar, []string{"services", "expose", "--port", "-7"}, 2, "Error: --port must be a positive number"},
		{"expose fraction", sidecar, []string{"services", "expose", "--port", "4.5"}, 2, "Error: --port must be a positive number"},
		{"expose too big", sidecar, []string{"services", "expose", "--port", "70000"}, 2, "Error: --port must be a positive number"},
		{"env no spec", nil, []string{"env", "apply"}, 2, "Error: Missing required flag: --spec"},
		{"env bad json", nil, []string{"env", "apply", "--spec", "{"}, 2, "prefix:Error: Invalid JSON in --spec: "},
		{"env not array", nil, []string{"env", "scrub", "--spec", `{"path":"x"}`}, 2, "Error: --spec must be a JSON array"},
		{"env absolute", nil, []string{"env", "apply", "--spec", `[{"path":"/etc/x","keys":[]}]`}, 2, "Error: Path must be relative: /etc/x"},
		{"env dotdot", nil, []string{"env", "apply", "--spec", `[{"workspacePath":"a/../..","path":"x","keys":[]}]`}, 2, "Error: Path must not contain '..': a/../.."},
		{"actions no gateway", map[string]string{"SANDBOX_MCP_AUTH_TOKEN": "t"}, []string{"actions", "list"}, 1, "Error: Actions require PROLIFERATE_GATEWAY_URL and PROLIFERATE_SESSION_ID"},
		{"actions no session", map[string]string{"SANDBOX_MCP_AUTH_TOKEN": "t", "PROLIFERATE_GATEWAY_URL": "http://x"}, []string{"actions", "grants", "list"}, 1, "Error: Actions require PROLIFERATE_GATEWAY_URL and PROLIFERATE_SESSION_ID"},
		{"actions no token", noTokenGateway, []string{"actions", "list"}, 2, "Error: " + errNoToken},
		{"run no integration", gateway, []string{"actions", "run", "--action", "a"}, 2, "Error: Missing required flag: --integration"},
		{"run no action", gateway, []string{"actions", "run", "--integration", "i"}, 2, "Error: Missing required flag: --action"},
		{"optional flag without value", gateway, []string{"actions", "run", "--integration", "i", "--action", "a", "--params"}, 2, "Error: Missing value for flag: --params"},
		{"run bad params", gateway, []string{"actions", "run", "--integration", "i", "--action", "a", "--params", "{nope"}, 1, "Error: Invalid JSON in --params"},
		{"guide no integration", gateway, []string{"actions", "guide"}, 2, "Error: Missing required flag: --integration"},
		{"grant no integration", gateway, []string{"actions", "grant", "request", "--action", "a"}, 2, "Error: Missing required flag: --integration"},
		{"grant no action", gateway, []string{"actions", "grant", "request", "--integration", "i"}, 2, "Error: Missing required flag: --action"},
		{"grant bad scope", gateway, []string{"actions", "grant", "request", "--integration", "i", "--action", "a", "--scope", "world"}, 2, "Error: --scope must be 'session' or 'org'"},
		{"grant zero calls", gateway, []string{"actions", "grant", "request", "--integration", "i", "--action", "a", "--max-calls", "0"}, 2, "Error: --max-calls must be a positive integer"},
		{"grant word calls", gateway, []string{"actions", "grant", "request", "--integration", "i", "--action", "a", "--max-calls=many"}, 2, "Error: --max-calls must be a positive integer"},
		{"grant fraction calls", gateway, []string{"actions", "grant", "request", "--integration", "i", "--action", "a", "--max-calls", "1.5"}, 2, "Error: --max-calls must be a positive integer"},
		{"grant empty calls", gateway, []string{"actions", "grant", "request", "--integration", "i", "--action", "a", "--max-calls="}, 2, "Error: --max-calls must be a positive integer"},
		{"grant unknown verb", gateway, []string{"actions", "grant", "revoke"}, 2, `Error: unknown command "revoke" for "proliferate actions grant"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if env == nil {
				env = map[string]string{"WORKSPACE_DIR": t.TempDir()}
			}
			r := cli(t, t.Context(), env, fast, tc.args...)
			if r.code != tc.code {
				t.Errorf("run(%q) = %d, want %d (stderr %q)", tc.args, r.code, tc.code, r.stderr)
			}
			got := strings.TrimSuffix(r.stderr, "\n")
			if p, ok := strings.CutPrefix(tc.stderr, "prefix:"); ok {
				if !strings.HasPrefix(got, p) {
					t.Errorf("run(%q) stderr = %q, want prefix %q", tc.args, got, p)
				}
			} else if got != tc.stderr {
				t.Errorf("run(%q) stderr = %q, want %q", tc.args, got, tc.stderr)
			}
			if r.stdout != "" {
				t.Errorf("run(%q) stdout = %q, want nothing", tc.args, r.stdout)
			}
		})
	}
}

// decodeLine checks that out is exactly one line of compact JSON and decodes it.
func decodeLine(t *testing.T, out string) map[string]any {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("stdout = %q, want one line", out)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(out)); err != nil {
		t.Fatalf("stdout %q is not JSON: %v", out, err)
	}
	if buf.String() != strings.TrimSuffix(out, "\n") {
		t.Errorf("stdout = %q, want compact JSON %q", out, buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestVersion(t *testing.T) {
	want := `{"version":"` + version.String() + `"}` + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := cli(t, t.Context(), nil, nil, args...)
		if r.code != 0 || r.stdout != want {
			t.Errorf("%q = %d %q, want 0 %q", args, r.code, r.stdout, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := cli(t, t.Context(), nil, nil, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "proliferate") {
			t.Errorf("completion %s = %d, %d bytes, want 0 and a script", shell, r.code, len(r.stdout))
		}
	}
}

func TestHTTPStatusMessage(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/services", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte("<html>bad gateway</html>"))
	})
	mux.HandleFunc("/api/expose", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte(`{"error":"caddy admin endpoint unreachable","exposedPort":3000}`))
	})
	srv := newServer(t, mux)
	env := sidecarEnv(srv, "tok")
	if r := cli(t, t.Context(), env, fast, "services", "list"); r.code != 1 || r.stderr != "Error: HTTP 502\n" {
		t.Errorf("list against a 502 page = %d %q, want 1 %q", r.code, r.stderr, "Error: HTTP 502\n")
	}
	if r := cli(t, t.Context(), env, fast, "services", "expose", "--port", "3000"); r.code != 1 || r.stderr != "Error: caddy admin endpoint unreachable\n" {
		t.Errorf("expose against a 502 = %d %q, want 1 and the error field", r.code, r.stderr)
	}
}

func newServer(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// equalJSON compares two JSON texts.
func equalJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("got %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Errorf("JSON mismatch (-want +got):\n%s", d)
	}
}
