package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/clitest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// The tests in this file are gh-style: each command is built with a runF that
// records the options it parsed, so flag parsing and validation are checked
// without an engine or any output.

// parse runs the command newCmd builds on args with a recording runF (see
// clitest.Parse).
func parse[T any](t *testing.T, newCmd func(*Factory, func(*T) error) *cobra.Command, args ...string) (*T, error) {
	t.Helper()
	return clitest.Parse(t, func(out, errOut *bytes.Buffer, runF func(*T) error) *cobra.Command {
		return newCmd(newFactory(func(string) string { return "" }, strings.NewReader(""), out, errOut), runF)
	}, args...)
}

var ignoreRuntime = []cmp.Option{
	cmpopts.IgnoreFields(CreateOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(ExecOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(CpOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(IDOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(IDsOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(TerminalOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(ImageBuildOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(ImageListOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(ImageRefsOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(ImageImportOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(ImageDockerfileOptions{}, "Factory"),
	cmpopts.IgnoreFields(ServeOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(PushOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(CodeOptions{}, "Ctx", "Factory"),
	cmp.AllowUnexported(gitFlags{}),
	cmpopts.EquateEmpty(),
}

// check compares what parse returned with want; a nil want means a usage error.
func check[T any](t *testing.T, args []string, got *T, err error, want *T) {
	t.Helper()
	if want == nil {
		var ue usageError
		if err == nil || got != nil || (!errors.As(err, &ue) && !isCobraUsage(err)) {
			t.Errorf("%q = %+v, %v; want a usage error before runF", args, got, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	if diff := cmp.Diff(want, got, ignoreRuntime...); diff != "" {
		t.Errorf("%q options (-want +got):\n%s", args, diff)
	}
}

func TestCreateFlags(t *testing.T) {
	tests := []struct {
		args []string
		want *CreateOptions
	}{
		{nil, &CreateOptions{}},
		{[]string{"--repo", "https://x/a.git#dev", "--env", "A=1", "--env", "B=", "--session", "s", "--snapshot", "snap", "--token-env", "TOK"},
			&CreateOptions{Repos: []string{"https://x/a.git#dev"}, Env: map[string]string{"A": "1", "B": ""}, Session: "s", Snapshot: "snap", TokenEnv: "TOK"}},
		{[]string{"--image", "debian:bookworm-slim", "--runtime", "runsc", "--memory", "512M", "--pids", "200", "--cpus", "1.5", "--disk", "2G",
			"--volume", "data:/data", "--volume", "cache:/home/user/.cache:ro"},
			&CreateOptions{Spec: engine.Spec{Image: "debian:bookworm-slim", Runtime: "runsc",
				Limits:  engine.Limits{MemoryBytes: 512 << 20, Pids: 200, CPUMillis: 1500, DiskBytes: 2 << 30},
				Volumes: []engine.VolumeMount{{Name: "data", Target: "/data"}, {Name: "cache", Target: "/home/user/.cache", ReadOnly: true}}}}},
		{[]string{"--bastion", "--platform-token-env", "PLAT", "--repo", "https://x/a.git"},
			&CreateOptions{Repos: []string{"https://x/a.git"}, Bastion: true, PlatformTokenEnv: "PLAT"}},
		{[]string{"--llm-keys-in-sandbox"}, &CreateOptions{LLMKeysInSandbox: true}},
		{[]string{"--platform-token-env", "PLAT"}, nil},
		{[]string{"--env", "novalue"}, nil},
		{[]string{"--memory", "lots"}, nil},
		{[]string{"--disk", "-1G"}, nil},
		{[]string{"--cpus", "0"}, nil},
		{[]string{"--pids", "0"}, nil},
		{[]string{"--pids", "x"}, nil},
		{[]string{"--volume", "data"}, nil},
		{[]string{"extra"}, nil},
	}
	for _, tt := range tests {
		got, err := parse(t, NewCmdCreate, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
}

func TestExecFlags(t *testing.T) {
	tests := []struct {
		args []string
		want *ExecOptions
	}{
		{[]string{"sb-1", "--", "ls", "-l"}, &ExecOptions{ID: "sb-1", Argv: []string{"ls", "-l"}}},
		{[]string{"sb-1", "--cwd", "/tmp", "--env", "K=V", "--timeout", "2s", "-it", "--", "bash"},
			&ExecOptions{ID: "sb-1", Argv: []string{"bash"}, Cwd: "/tmp", Env: []string{"K=V"}, Timeout: 2 * time.Second, Stdin: true, TTY: true}},
		{[]string{"sb-1"}, nil},
		{[]string{"sb-1", "--env", "=V", "--", "true"}, nil},
	}
	for _, tt := range tests {
		got, err := parse(t, NewCmdExec, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
}

func TestCpArgs(t *testing.T) {
	tests := []struct {
		args []string
		want *CpOptions
	}{
		{[]string{"sb-1:/etc/hosts", "-"}, &CpOptions{ID: "sb-1", Out: true, Src: "/etc/hosts", Dst: "-"}},
		{[]string{"./dir", "sb-1:/home/user"}, &CpOptions{ID: "sb-1", Src: "./dir", Dst: "/home/user"}},
		{[]string{"a", "b"}, nil},
		{[]string{"x:/a", "y:/b"}, nil},
	}
	for _, tt := range tests {
		got, err := parse(t, NewCmdCp, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
}

func TestIDCommands(t *testing.T) {
	for name, newCmd := range map[string]func(*Factory, func(*IDOptions) error) *cobra.Command{
		"snapshot": NewCmdSnapshot, "tunnels": NewCmdTunnels,
		"pause":  func(f *Factory, r func(*IDOptions) error) *cobra.Command { return NewCmdPause(f, true, r) },
		"resume": func(f *Factory, r func(*IDOptions) error) *cobra.Command { return NewCmdPause(f, false, r) },
	} {
		got, err := parse(t, newCmd, "sb-9")
		check(t, []string{name, "sb-9"}, got, err, &IDOptions{ID: "sb-9"})
		got, err = parse(t, newCmd)
		check(t, []string{name}, got, err, nil)
	}
	ids, err := parse(t, NewCmdTerminate, "a", "b")
	check(t, []string{"terminate", "a", "b"}, ids, err, &IDsOptions{IDs: []string{"a", "b"}})
	term, err := parse(t, NewCmdTerminal, "--token", "t", "http://127.0.0.1:4000")
	check(t, []string{"terminal"}, term, err, &TerminalOptions{Target: "http://127.0.0.1:4000", Token: "t"})
}

// TestCreateRefusesWhatTheEngineCannotDo: a runtime the engine does not offer
// ends create before any sandbox exists, saying why.
func TestCreateRefusesWhatTheEngineCannotDo(t *testing.T) {
	requireNamespaces(t)
	bins := buildBinaries(t)
	env := map[string]string{"SANDBOXCTL_SANDBOX_MCP": bins + "/sandbox-mcp", "SANDBOXCTL_DATA_DIR": t.TempDir()}
	var stdout, stderr strings.Builder
	code := run(t.Context(), []string{"create", "--runtime", "no-such-runtime"}, func(k string) string { return env[k] },
		strings.NewReader(""), &stdout, &stderr)
	if code != 1 || stdout.String() != "" || !strings.Contains(stderr.String(), `runtime "no-such-runtime"`) ||
		!strings.Contains(stderr.String(), "not supported") || !strings.Contains(stderr.String(), "was not created") {
		t.Errorf("create --runtime no-such-runtime = %d, stdout %q, stderr %q; want 1 and the refusal", code, stdout.String(), stderr.String())
	}
}

// TestRefusalNamesTheFlag: a refusal names the flags it is about and the provider.
func TestRefusalNamesTheFlag(t *testing.T) {
	mem := engine.Spec{Limits: engine.Limits{MemoryBytes: 1 << 20}}
	tests := []struct {
		name string
		spec engine.Spec
		err  error
		want string // "" : err comes back as it is
	}{
		{"limit", mem, fmt.Errorf("memory limit: no: %w", engine.ErrLimit), "provider e2b refuses --memory"},
		{"two limits", engine.Spec{Limits: engine.Limits{Pids: 1, DiskBytes: 1}}, fmt.Errorf("pids and disk: %w", engine.ErrLimit), "--pids, --disk"},
		{"unnamed", mem, fmt.Errorf("something: %w", engine.ErrUnsupported), "refuses the flag"},
		{"volume", engine.Spec{Volumes: []engine.VolumeMount{{Name: "v", Target: "/v"}}}, fmt.Errorf("volume v: %w", engine.ErrNotFound), "sandboxctl volume create"},
		{"other", mem, errors.New("boom"), ""},
	}
	for _, tt := range tests {
		got := refusal("e2b", tt.spec, tt.err)
		if !errors.Is(got, tt.err) {
			t.Errorf("%s: refusal(%v) = %v, want it wrapped", tt.name, tt.err, got)
		}
		if tt.want == "" && got != tt.err || tt.want != "" && !strings.Contains(got.Error(), tt.want) {
			t.Errorf("%s: refusal(%v) = %q, want %q in it", tt.name, tt.err, got, tt.want)
		}
	}
}
