package main

import (
	"github.com/proliferate-ai/sandbox-mcp/internal/version"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// app is one run of sandboxctl: its streams, environment and global flags.
type app struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	provider   string
	dataDir    string
	unisolated bool
	json       bool
	verbose    bool
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// exitError ends sandboxctl with a code and no message (exec passes its command's).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func knownNames[V any](m map[string]V) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func (a *app) logger() *slog.Logger {
	if !a.verbose {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// progress writes a progress line on stderr (never stdout: it is for results).
func (a *app) progress(format string, args ...any) {
	fmt.Fprintf(a.stderr, format+"\n", args...)
}

// openedBackend is a backend with its close.
type openedBackend struct{ *backend }

func (b openedBackend) close() {
	if b.Close != nil {
		_ = b.Close()
	}
}

func (a *app) open(ctx context.Context, name string) (openedBackend, error) {
	if name == "" {
		name = a.provider
	}
	b, err := openBackend(ctx, name, backendOptions{DataDir: a.dataDir, Unisolated: a.unisolated,
		Getenv: a.getenv, Stderr: a.stderr, Logger: a.logger()})
	if err != nil {
		return openedBackend{}, err
	}
	return openedBackend{b}, nil
}

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newCmdRoot builds the command tree.
func newCmdRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "sandboxctl",
		Short: "Create and drive sandboxes on any provider (local, modal, e2b)",
		Long: "sandboxctl creates sandboxes with the platform's boot plan and drives them:\n" +
			"exec, cp, snapshot, pause/resume, terminate, tunnels and an interactive terminal.\n" +
			"The local provider runs each sandbox in its own Linux namespaces on this machine.",
		Version:           version.String(),
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetVersionTemplate("sandboxctl {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVarP(&a.provider, "provider", "p", "local", "sandbox provider: local, modal or e2b")
	pf.StringVar(&a.dataDir, "data-dir", defaultDataDir(a.getenv), "state of the local engine ($SANDBOXCTL_DATA_DIR)")
	pf.BoolVar(&a.unisolated, "unisolated", false, "local: run sandboxes without namespaces (no isolation)")
	pf.BoolVar(&a.json, "json", false, "print results as JSON")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "log what happens on stderr")
	root.AddCommand(newCmdCreate(a), newCmdList(a), newCmdExec(a), newCmdCp(a), newCmdSnapshot(a),
		newCmdPause(a, true), newCmdPause(a, false), newCmdTerminate(a), newCmdTunnels(a),
		newCmdTerminal(a), newCmdServe(a), newCmdPush(a), newCmdSync(a), newCmdCode(a), newCmdImage(a))
	return root
}

// run runs sandboxctl and returns its exit code: 0 ok, 1 failure, 2 usage, or the
// exit code of exec's command.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	root := newCmdRoot(a)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "Error:", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return 2
	}
	return 1
}

// isCobraUsage recognizes cobra's own argument errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "required flag", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
