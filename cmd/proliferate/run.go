package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
	"github.com/proliferate-ai/sandbox-mcp/provider/sidecar"

	"net"

	"sync"

	"syscall"

	"github.com/proliferate-ai/sandbox-mcp/rules"

	"strings"

	"github.com/proliferate-ai/sandbox-mcp/internal/version"
)

// Exit codes: the only place they are decided.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// IOStreams are the command's standard streams.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Factory carries what commands need from the outside; tests build their own
// to shorten delays.
type Factory struct {
	IO     IOStreams
	Getenv func(string) string
	Now    func() time.Time

	// HTTPClient is shared by the sidecar and gateway clients.
	HTTPClient *http.Client
	// RetryDelay is the pause between retries of a refused sidecar connection.
	RetryDelay time.Duration
	// ActionPoll is the interval of action approval polls.
	ActionPoll time.Duration
	// LogsFirstFrameWait is how long `services logs` without --follow waits
	// for a first payload before it reports an empty log.
	LogsFirstFrameWait time.Duration
	// OverridesFile replaces the env overrides file of the configuration when set.
	OverridesFile string
	// ServicePoll is the interval of `services wait` and `start --wait` polls.
	ServicePoll time.Duration

	// sidecar is set once Sidecar made a client: where it points and why, so
	// errors can name the URL and the variables to change.
	sidecar *sidecarTarget
}

// sidecarTarget is the sidecar a command talks to.
type sidecarTarget struct {
	url, urlFrom, tokenFrom string
}

func newFactory(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) *Factory {
	return &Factory{
		IO:          IOStreams{In: stdin, Out: stdout, ErrOut: stderr},
		Getenv:      getenv,
		Now:         time.Now,
		HTTPClient:  &http.Client{},
		RetryDelay:  sidecar.DefaultRetryDelay,
		ActionPoll:  grants.DefaultPollInterval,
		ServicePoll: 250 * time.Millisecond,

		LogsFirstFrameWait: 2 * time.Second,
	}
}

// config reads the environment through internal/config.
func (f *Factory) config() (config.Config, error) {
	return config.Load(f.Getenv, ".")
}

// errNoToken is the contract's message when neither token variable is set.
const errNoToken = rules.NoToken

// Sidecar returns the sidecar client; no token or a URL that is not
// http(s)://host[:port] is a usage error. While a refused connection is
// retried it says once on stderr what it is waiting for.
func (f *Factory) Sidecar() (*sidecar.Client, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, usageErrorf("%s", errNoToken)
	}
	t := &sidecarTarget{url: cfg.SidecarURL, urlFrom: cfg.SidecarURLFrom, tokenFrom: rules.EnvAuthToken}
	if f.Getenv(rules.EnvAuthToken) == "" {
		t.tokenFrom = rules.EnvAuthTokenFallback
	}
	var once sync.Once
	c, err := sidecar.New(sidecar.Options{BaseURL: cfg.SidecarURL, Token: cfg.Token, HTTPClient: f.HTTPClient, RetryDelay: f.RetryDelay,
		OnRetry: func(error, int) {
			once.Do(func() { fmt.Fprintf(f.IO.ErrOut, "waiting for the sidecar at %s…\n", cfg.SidecarURL) })
		}})
	if err != nil {
		from := t.urlFrom
		if from == "" {
			from = "the default URL"
		}
		return nil, usageErrorf("sidecar URL %q (from %s) is not a URL; want http://host:port, e.g. %s", cfg.SidecarURL, from, config.DefaultSidecarURL)
	}
	f.sidecar = t
	return c, nil
}

// explain adds to a failed sidecar call where the CLI looked and which
// variables set that: a connection that failed names the URL, a rejected
// token names the variable it came from. API answers keep their message.
func (t *sidecarTarget) explain(err error) error {
	var ae *sidecar.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return fmt.Errorf("%w (the sidecar at %s rejected the token from %s)", err, t.url, t.tokenFrom)
	case errors.As(err, &ae):
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) {
		from := "set " + rules.EnvSidecarURL + " to change it"
		if t.urlFrom != "" {
			from = "from " + t.urlFrom
		}
		return fmt.Errorf("cannot reach the sidecar at %s (%s): %w", t.url, from, err)
	}
	return err
}

// Gateway returns the actions gateway client.
func (f *Factory) Gateway() (*grants.Client, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	c, err := grants.New(grants.Options{
		GatewayURL: cfg.GatewayURL, SessionID: cfg.SessionID, Token: cfg.Token,
		HTTPClient: f.HTTPClient, PollInterval: f.ActionPoll, Now: f.Now,
	})
	if errors.Is(err, grants.ErrNoToken) {
		return nil, usageErrorf("%s", err.Error())
	}
	return c, err
}

// usageError makes the command exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// interruptedError ends a command that Ctrl-C stopped; msg may be empty.
type interruptedError struct{ msg string }

func (e *interruptedError) Error() string { return e.msg }

// run is the whole program: parse args, run the command, map the outcome to an exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	return execute(ctx, newFactory(getenv, stdin, stdout, stderr), args)
}

func execute(ctx context.Context, f *Factory, args []string) int {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && f.sidecar != nil && ctx.Err() == nil {
		err = f.sidecar.explain(err)
	}
	return exitCode(f.IO.ErrOut, ctx, err)
}

// exitCode prints err and says how the process ends.
func exitCode(stderr io.Writer, ctx context.Context, err error) int {
	if err == nil {
		return exitOK
	}
	var ie *interruptedError
	if errors.As(err, &ie) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		if ie != nil && ie.msg != "" {
			fmt.Fprintf(stderr, "Error: %s\n", ie.msg)
		}
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "Error: %s\n", err.Error())
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "proliferate <command> <subcommand> [flags]",
		Short: "Manage sandbox services, env files and platform actions",
		Long: `proliferate manages the sandbox's services through the sidecar API, writes the
workspace's env files, and runs platform actions through the gateway.

Every command prints one line of JSON on stdout. Errors go to stderr as
"Error: <message>". Exit codes: 0 ok, 1 runtime or HTTP failure, 2 usage error,
130 interrupted (Ctrl-C).

Environment:
` + strings.TrimRight(settingsHelp(), "\n"),
		Version:       version.String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          groupArgs,
		RunE:          groupRun,

		SuggestionsMinimumDistance: 2,
	}
	root.SetVersionTemplate(`{"version":{{printf "%q" .Version}}}` + "\n")
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.SetIn(f.IO.In)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		// A required flag given last with no value is as missing as one not
		// given; an optional one is named as what it is.
		var vre *pflag.ValueRequiredError
		if errors.As(err, &vre) && vre.GetFlag() != nil {
			if name := vre.GetFlag().Name; requiredFlagNames[name] {
				return usageErrorf("Missing required flag: --%s", name)
			}
			return usageErrorf("Missing value for flag: --%s", vre.GetFlag().Name)
		}
		return &usageError{msg: err.Error()}
	})
	root.AddCommand(NewCmdServices(f), NewCmdEnv(f), NewCmdActions(f), NewCmdVersion(f, nil))
	return root
}

// newGroup returns a command that only holds subcommands.
func newGroup(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: groupArgs, RunE: groupRun, SuggestionsMinimumDistance: 2}
}

func groupArgs(*cobra.Command, []string) error { return nil }

// groupRun answers a group called without a known subcommand: a usage error.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErrorf("missing command for %q; run '%s --help'", cmd.CommandPath(), cmd.CommandPath())
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return &usageError{msg: msg}
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// requiredFlagNames are the flags that are required wherever they appear.
var requiredFlagNames = map[string]bool{"name": true, "command": true, "port": true, "spec": true, "integration": true, "action": true}

// requireFlags reports the first named flag that is missing or empty.
func requireFlags(cmd *cobra.Command, names ...string) error {
	for _, n := range names {
		fl := cmd.Flags().Lookup(n)
		if fl == nil || fl.Value.String() == "" || (fl.Value.Type() == "stringArray" && fl.Value.String() == "[]") {
			return usageErrorf("Missing required flag: --%s", n)
		}
	}
	return nil
}

// printJSON writes body as one line of compact JSON; a body that is not JSON
// is written as it is.
func printJSON(w io.Writer, body []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, body); err != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(body))
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printValue writes v as one line of compact JSON.
func printValue(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	return printJSON(w, b)
}

// isTerminal reports whether w is a character device, for progress output.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// NewCmdVersion builds `proliferate version`.
func NewCmdVersion(f *Factory, runF func() error) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the CLI version (also --version)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF()
			}
			return printValue(f.IO.Out, map[string]string{"version": version.String()})
		},
	}
}

// settingsHelp lists the environment the CLI reads, from config.Settings.
func settingsHelp() string {
	var b strings.Builder
	config.WriteSettings(&b, false)
	return b.String()
}
