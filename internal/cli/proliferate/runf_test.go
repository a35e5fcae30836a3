package proliferate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/clitest"
	"github.com/proliferate-ai/sandbox-mcp/internal/envfiles"
	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
)

// The tests in this file are gh-style: each command is built with a runF that
// records the options it parsed, so flag parsing and validation are checked
// without a sidecar, a gateway or any output.

// parse runs the command newCmd builds on args with a recording runF (see
// clitest.Parse).
func parse[T any](t *testing.T, newCmd func(*Factory, func(*T) error) *cobra.Command, args ...string) (*T, error) {
	t.Helper()
	return clitest.Parse(t, func(out, errOut *bytes.Buffer, runF func(*T) error) *cobra.Command {
		return newCmd(newFactory(func(string) string { return "" }, nil, out, errOut), runF)
	}, args...)
}

// ignoreRuntime leaves out the fields every options struct carries that are
// no parsed input.
var ignoreRuntime = []cmp.Option{
	cmpopts.IgnoreFields(StartOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(WaitOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(LogsOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(ExposeOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(NameOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(GatewayOptions{}, "Ctx", "Factory"),
	cmpopts.IgnoreFields(EnvOptions{}, "Factory"),
	cmpopts.EquateEmpty(),
}

// check compares what parse returned with want; a nil want means args must
// be refused as a usage error before runF.
func check[T any](t *testing.T, args []string, got *T, err error, want *T) {
	t.Helper()
	var ue *usageError
	switch {
	case want == nil && got != nil:
		t.Errorf("%q reached runF with %+v, want a usage error", args, *got)
	case want == nil && !errors.As(err, &ue):
		t.Errorf("%q error = %v, want a usage error", args, err)
	case want != nil && err != nil:
		t.Errorf("%q error = %v, want none", args, err)
	case want != nil && got == nil:
		t.Errorf("%q never reached runF", args)
	case want != nil:
		if diff := cmp.Diff(want, got, ignoreRuntime...); diff != "" {
			t.Errorf("%q options (-want +got):\n%s", args, diff)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestServicesStartFlags(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	def := func(req apitype.StartServiceRequest) *StartOptions {
		return &StartOptions{Request: req, WaitTimeout: 2 * time.Minute, Settle: time.Second}
	}
	nc := []string{"--name", "web", "--command", "npm run dev"}
	base := apitype.StartServiceRequest{Name: "web", Command: "npm run dev"}
	with := func(f func(*apitype.StartServiceRequest)) apitype.StartServiceRequest {
		r := base
		f(&r)
		return r
	}
	tests := []struct {
		name string
		args []string
		want *StartOptions // nil: a usage error
	}{
		{"minimal", nil, def(base)},
		{"relative cwd is made absolute", []string{"--cwd", "app"},
			def(with(func(r *apitype.StartServiceRequest) { r.Cwd = filepath.Join(wd, "app") }))},
		{"absolute cwd", []string{"--cwd", "/srv"},
			def(with(func(r *apitype.StartServiceRequest) { r.Cwd = "/srv" }))},
		{"supervision", []string{"--restart", "on-failure", "--max-restarts", "3", "--stop-signal", "int", "--stop-timeout", "2s",
			"--env", "A=1", "--env", "B=x=y"},
			def(with(func(r *apitype.StartServiceRequest) {
				r.Restart, r.MaxRestarts, r.StopSignal, r.StopTimeoutMs = "on-failure", ptr(3), "SIGINT", ptr(2000)
				r.Env = map[string]string{"A": "1", "B": "x=y"}
			}))},
		{"tcp probe with timeout", []string{"--ready-tcp", "3000", "--ready-timeout", "1500ms"},
			def(with(func(r *apitype.StartServiceRequest) {
				r.Readiness = &apitype.Readiness{TCP: ptr(3000), TimeoutMs: 1500}
			}))},
		{"log probe", []string{"--ready-log", "listening on \\d+"},
			def(with(func(r *apitype.StartServiceRequest) { r.Readiness = &apitype.Readiness{Log: `listening on \d+`} }))},
		{"wait", []string{"--wait", "--wait-timeout", "30s", "--settle", "0s", "--stop-on-timeout"},
			&StartOptions{Request: base, Wait: true, WaitTimeout: 30 * time.Second, StopOnTimeout: true}},

		{"no name", []string{"--name", ""}, nil},
		{"bad restart", []string{"--restart", "sometimes"}, nil},
		{"negative max restarts", []string{"--max-restarts", "-1"}, nil},
		{"port out of range", []string{"--ready-tcp", "70000"}, nil},
		{"ftp probe", []string{"--ready-http", "ftp://x"}, nil},
		{"bad regexp", []string{"--ready-log", "("}, nil},
		{"two probes", []string{"--ready-tcp", "80", "--ready-log", "up"}, nil},
		{"ready timeout without probe", []string{"--ready-timeout", "1s"}, nil},
		{"env without =", []string{"--env", "A"}, nil},
		{"env without key", []string{"--env", "=1"}, nil},
		{"unknown signal", []string{"--stop-signal", "SIGUSR1"}, nil},
		{"negative stop timeout", []string{"--stop-timeout", "-1s"}, nil},
		{"zero wait timeout", []string{"--wait-timeout", "0s"}, nil},
		{"settle without wait", []string{"--settle", "2s"}, nil},
		{"settle with probe", []string{"--wait", "--settle", "2s", "--ready-tcp", "80"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{}, nc...), tt.args...)
			got, err := parse(t, NewCmdServicesStart, args...)
			check(t, args, got, err, tt.want)
		})
	}
}

func TestServicesNameFlags(t *testing.T) {
	cmds := map[string]func(*Factory, func(*NameOptions) error) *cobra.Command{
		"stop": NewCmdServicesStop, "restart": NewCmdServicesRestart,
	}
	for name, newCmd := range cmds {
		for _, tt := range []struct {
			args []string
			want *NameOptions
		}{
			{[]string{"--name", "web"}, &NameOptions{Name: "web"}},
			{nil, nil},
			{[]string{"--name", "web", "extra"}, nil},
		} {
			got, err := parse(t, newCmd, tt.args...)
			check(t, append([]string{name}, tt.args...), got, err, tt.want)
		}
	}
}

func TestServicesWaitExposeLogsFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want *WaitOptions
	}{
		{[]string{"--name", "web"}, &WaitOptions{Name: "web", Timeout: 2 * time.Minute}},
		{[]string{"--name", "web", "--timeout", "5s"}, &WaitOptions{Name: "web", Timeout: 5 * time.Second}},
		{[]string{"--name", "web", "--timeout", "0s"}, nil},
		{[]string{"--timeout", "5s"}, nil},
	} {
		got, err := parse(t, NewCmdServicesWait, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
	for _, tt := range []struct {
		args []string
		want *ExposeOptions
	}{
		{[]string{"--port", "3000"}, &ExposeOptions{Port: 3000}},
		{[]string{"--port", " 8080 "}, &ExposeOptions{Port: 8080}},
		{[]string{"--port", "0"}, nil},
		{[]string{"--port", "65536"}, nil},
		{[]string{"--port", "web"}, nil},
		{nil, nil},
	} {
		got, err := parse(t, NewCmdServicesExpose, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
	for _, tt := range []struct {
		args []string
		want *LogsOptions
	}{
		{[]string{"--name", "web"}, &LogsOptions{Name: "web"}},
		{[]string{"--name", "web", "-f", "--raw"}, &LogsOptions{Name: "web", Follow: true, Raw: true}},
		{[]string{"--name", "web", "--tail", "20"}, &LogsOptions{Name: "web", Tail: 20}},
		{[]string{"--name", "web", "--tail", "0"}, nil},
		{[]string{"--name", "web", "--tail", "5", "--follow"}, nil},
		{[]string{"--raw"}, nil},
	} {
		got, err := parse(t, NewCmdServicesLogs, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
}

func TestGatewayFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want *GatewayOptions
	}{
		{[]string{"--integration", "github", "--action", "list_prs"},
			&GatewayOptions{Integration: "github", Action: "list_prs"}},
		{[]string{"--integration", "github", "--action", "get", "--params", `{"n":1}`},
			&GatewayOptions{Integration: "github", Action: "get", Params: json.RawMessage(`{"n":1}`)}},
		{[]string{"--integration", "github"}, nil},
	} {
		got, err := parse(t, NewCmdActionsRun, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
	// Invalid JSON in --params is a runtime error (exit 1), as the contract says.
	if got, err := parse(t, NewCmdActionsRun, "--integration", "g", "--action", "a", "--params", "{"); got != nil || err == nil {
		t.Errorf("actions run --params { = %+v, %v; want an error before runF", got, err)
	}
	for _, tt := range []struct {
		args []string
		want *GatewayOptions
	}{
		{[]string{"--integration", "github"}, &GatewayOptions{Integration: "github"}},
		{nil, nil},
	} {
		got, err := parse(t, NewCmdActionsGuide, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
	ia := []string{"--integration", "github", "--action", "merge"}
	for _, tt := range []struct {
		args []string
		want *GatewayOptions
	}{
		{nil, &GatewayOptions{Integration: "github", Action: "merge",
			Grant: grants.GrantRequest{Integration: "github", Action: "merge", Scope: grants.ScopeSession}}},
		{[]string{"--scope", "org", "--max-calls", "3"}, &GatewayOptions{Integration: "github", Action: "merge",
			Grant: grants.GrantRequest{Integration: "github", Action: "merge", Scope: grants.ScopeOrg, MaxCalls: ptr(3)}}},
		{[]string{"--scope", "world"}, nil},
		{[]string{"--max-calls", "0"}, nil},
		{[]string{"--max-calls", ""}, nil},
	} {
		args := append(append([]string{}, ia...), tt.args...)
		got, err := parse(t, NewCmdGrantRequest, args...)
		check(t, args, got, err, tt.want)
	}
}

func TestEnvFlags(t *testing.T) {
	spec := `[{"workspacePath":".","path":".env.local","format":"dotenv","mode":"secret","keys":[{"key":"A","required":true}]}]`
	want := &EnvOptions{Entries: []envfiles.Entry{{WorkspacePath: ".", Path: ".env.local", Format: "dotenv", Mode: "secret",
		Keys: []envfiles.Key{{Key: "A", Required: true}}}}}
	for name, newCmd := range map[string]func(*Factory, func(*EnvOptions) error) *cobra.Command{
		"apply": NewCmdEnvApply, "scrub": NewCmdEnvScrub,
	} {
		got, err := parse(t, newCmd, "--spec", spec)
		check(t, []string{name, "--spec", spec}, got, err, want)
		if got, err := parse(t, newCmd); got != nil || err == nil {
			t.Errorf("env %s without --spec = %+v, %v; want an error before runF", name, got, err)
		}
		if got, err := parse(t, newCmd, "--spec", "[{"); got != nil || err == nil {
			t.Errorf("env %s --spec [{ = %+v, %v; want an error before runF", name, got, err)
		}
	}
}

func TestNoArgCommands(t *testing.T) {
	list := map[string]func(*Factory, func(*ListOptions) error) *cobra.Command{
		"services list": NewCmdServicesList, "services events": NewCmdServicesEvents,
	}
	for name, newCmd := range list {
		if got, err := parse(t, newCmd); got == nil || err != nil {
			t.Errorf("%s = %v, %v; want runF reached", name, got, err)
		}
		got, err := parse(t, newCmd, "web")
		check(t, []string{name, "web"}, got, err, nil)
	}
	gw := map[string]func(*Factory, func(*GatewayOptions) error) *cobra.Command{
		"actions list": NewCmdActionsList, "grants list": NewCmdGrantsList,
	}
	for name, newCmd := range gw {
		if got, err := parse(t, newCmd); got == nil || err != nil {
			t.Errorf("%s = %v, %v; want runF reached", name, got, err)
		}
		got, err := parse(t, newCmd, "x")
		check(t, []string{name, "x"}, got, err, nil)
	}
}

func TestVersionCommandArgs(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantRun bool
	}{
		{nil, true},
		{[]string{"x"}, false},
	} {
		ran := false
		cmd := NewCmdVersion(newFactory(func(string) string { return "" }, nil, nil, nil), func() error { ran = true; return nil })
		cmd.SetArgs(tt.args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.ExecuteContext(t.Context())
		var ue *usageError
		if ran != tt.wantRun || (!tt.wantRun && !errors.As(err, &ue)) {
			t.Errorf("version %q: ran %v, error %v; want ran %v (else a usage error)", tt.args, ran, err, tt.wantRun)
		}
	}
}
