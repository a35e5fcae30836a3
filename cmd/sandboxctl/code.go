package main

// `sandboxctl code …`: code execution for models (provider/coderun) as a CLI and as an
// MCP server over stdio.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/version"
	"github.com/proliferate-ai/sandbox-mcp/provider/coderun"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/progress"
)

// CodeOptions are the inputs of the `code` subcommands; each uses the fields
// its flags set.
type CodeOptions struct {
	Ctx     context.Context
	Factory *Factory
	// Config is --config, the TOML file with the [sandbox] section.
	Config string
	// ProviderSet is whether --provider was given: it then overrides the config's.
	ProviderSet bool
	// Session is --session.
	Session string
	// Args are the positional arguments: run's FILE|-, search's query words.
	Args []string
	// Description is run's --description.
	Description string
	// Reset is run's --reset; Typecheck its --typecheck, TypecheckSet whether it was
	// given (else the config's typecheck holds).
	Reset        bool
	Typecheck    bool
	TypecheckSet bool
	// Package, K and Fetch are search's --package, -k and --fetch.
	Package string
	K       int
	Fetch   bool
	// TTL is gc's --ttl.
	TTL time.Duration
}

// NewCmdCode builds `code` and its subcommands.
func NewCmdCode(f *Factory, runF func(*CodeOptions) error) *cobra.Command {
	config := new(string)
	cmd := &cobra.Command{
		Use:   "code",
		Short: "Run TypeScript for models in sandboxes: run_code, search_docs, save_code_modules",
		Long: "Code execution for models: TypeScript run by Deno in a session's sandbox against the npm\n" +
			"packages of the [sandbox] section of a TOML config (--config), their docs searchable.\n" +
			"A session's sandbox outlives one call: calls with the same --session share variables.\n" +
			"docs/code-execution.md opens with a config to copy.",
		Example: "  sandboxctl code --config code.toml snapshot\n" +
			"  echo 'const x = 1 + 1; x' | sandboxctl code --config code.toml run --session s1",
	}
	cmd.PersistentFlags().StringVar(config, "config", "", "TOML file with the [sandbox] section (required)")
	_ = cmd.MarkPersistentFlagRequired("config")
	cmd.AddCommand(NewCmdCodeRun(f, config, runF), NewCmdCodeClose(f, config, runF), NewCmdCodeSearch(f, config, runF),
		NewCmdCodeSnapshot(f, config, runF), NewCmdCodeGC(f, config, runF), NewCmdCodeMCP(f, config, runF))
	return cmd
}

// codeRunE is the RunE of a code subcommand: it completes o from the command
// line and calls runF (a test's) or run.
func codeRunE(o *CodeOptions, config *string, runF, run func(*CodeOptions) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		o.Ctx, o.Config, o.Args = cmd.Context(), *config, args
		o.ProviderSet = cmd.Flags().Changed("provider")
		return runOr(o, runF, run)
	}
}

// openRunner loads the config and opens the runner on the provider's engine,
// its progress lines going to progress. The close ends both.
// reap is Options.ReapEvery and spares Options.Spares.
func (o *CodeOptions) openRunner(progress io.Writer, reap time.Duration, spares int) (*coderun.Runner, func(), error) {
	a := o.Factory
	cfg, err := coderun.LoadFile(o.Config, a.getenv)
	if err != nil {
		return nil, nil, err
	}
	if !cfg.Enabled {
		return nil, nil, fmt.Errorf("%s: %w", o.Config, coderun.ErrOff)
	}
	provider := cfg.Provider
	if o.ProviderSet {
		provider = a.provider
	}
	eng, images, closeEng, err := a.codeEngine(o.Ctx, provider)
	if err != nil {
		return nil, nil, err
	}
	ro := coderun.Options{Config: cfg, Engine: eng, DataDir: filepath.Join(a.dataDir, "coderun"),
		Progress: progress, Logger: a.logger(), ReapEvery: reap, Spares: spares}
	if images != nil {
		ro.Images = images // a nil *store.Store would be a non-nil ImageStore
	}
	r, err := coderun.New(o.Ctx, ro)
	if err != nil {
		closeEng()
		return nil, nil, err
	}
	return r, func() { r.Close(); closeEng() }, nil
}

// codeEngine is the engine of a provider. The local engine is opened without the
// boot plan's binaries (code execution does not need sandbox-mcp) and, isolated, with
// the data dir's image store, which it returns too: the dependency snapshot is an
// image there when the store has its base.
func (a *Factory) codeEngine(ctx context.Context, provider string) (engine.Engine, *store.Store, func(), error) {
	if provider != "local" {
		b, err := a.open(ctx, provider)
		if err != nil {
			return nil, nil, nil, err
		}
		return b.Engine, nil, b.close, nil
	}
	o := local.EngineOptions{DataDir: a.dataDir, Unisolated: a.unisolated, Logger: a.logger()}
	var images *store.Store
	if !a.unisolated {
		s, err := a.openImageStore()
		if err != nil {
			return nil, nil, nil, err
		}
		o.Images, images = s, s
	}
	e, err := local.NewEngine(o)
	if errors.Is(err, engine.ErrNotIsolated) {
		return nil, nil, nil, notIsolated(err)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return e, images, func() { e.Close() }, nil
}

// withRunner opens the session runner (no idle reaper, no spare sandboxes: one
// call of a CLI command) with a progress reporter, runs fn with both and closes
// the runner. fn ends the reporter before it prints its result.
func (o *CodeOptions) withRunner(fn func(r *coderun.Runner, rep *progress.Reporter) error) error {
	rep := o.Factory.reporter()
	defer rep.Done()
	r, done, err := o.openRunner(rep, -1, 0)
	if err != nil {
		return err
	}
	defer done()
	return fn(r, rep)
}

// result ends the progress report and prints v as JSON.
func (o *CodeOptions) result(rep *progress.Reporter, v any) error {
	rep.Done()
	return o.Factory.printJSON(v)
}

// NewCmdCodeRun builds `code run`.
func NewCmdCodeRun(f *Factory, config *string, runF func(*CodeOptions) error) *cobra.Command {
	o := &CodeOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "run --session S [FILE|-]",
		Short: "Run TypeScript in a session and print the JSON result; exit 1 when it failed",
		Example: "  sandboxctl code --config code.toml run --session s1 script.ts\n" +
			"  echo 'Deno.version' | sandboxctl code --config code.toml run --session s1 -",
		Args: cobra.MaximumNArgs(1),
	}
	runE := codeRunE(o, config, runF, codeRun)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		o.TypecheckSet = c.Flags().Changed("typecheck")
		return runE(c, args)
	}
	cmd.Flags().StringVar(&o.Session, "session", "", "session id (required)")
	cmd.Flags().StringVar(&o.Description, "description", "", "what the code does (logged)")
	cmd.Flags().BoolVar(&o.Reset, "reset", false, "restart the session's REPL first (its variables are gone, /workspace stays)")
	cmd.Flags().BoolVar(&o.Typecheck, "typecheck", false, "type-check the code with deno check before running it (default: the config's typecheck)")
	_ = cmd.MarkFlagRequired("session")
	return cmd
}

func codeRun(o *CodeOptions) error {
	code, err := readCode(o.Factory.stdin, o.Args)
	if err != nil {
		return err
	}
	return o.withRunner(func(r *coderun.Runner, rep *progress.Reporter) error {
		if _, err := r.ReapIdle(o.Ctx, time.Now()); err != nil {
			return err
		}
		s, err := r.Session(o.Session)
		if err != nil {
			return usageError{err}
		}
		req := coderun.RunRequest{Code: code, Description: o.Description, Reset: o.Reset}
		if o.TypecheckSet {
			req.Typecheck = &o.Typecheck
		}
		res, err := s.Run(o.Ctx, req)
		if err != nil {
			return err
		}
		if err := o.result(rep, res); err != nil {
			return err
		}
		if !res.Success {
			return exitError{1}
		}
		return nil
	})
}

// readCode reads FILE, or stdin for "-" or no argument.
func readCode(stdin io.Reader, args []string) (string, error) {
	var b []byte
	var err error
	if len(args) == 0 || args[0] == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 4<<20))
	} else {
		b, err = os.ReadFile(args[0])
	}
	if err != nil {
		return "", fmt.Errorf("read code: %w", err)
	}
	return string(b), nil
}

// NewCmdCodeClose builds `code close`.
func NewCmdCodeClose(f *Factory, config *string, runF func(*CodeOptions) error) *cobra.Command {
	o := &CodeOptions{Factory: f}
	cmd := &cobra.Command{
		Use:     "close --session S",
		Short:   "Destroy a session's sandbox; its volume stays until gc",
		Example: "  sandboxctl code --config code.toml close --session s1",
		Args:    cobra.NoArgs,
		RunE:    codeRunE(o, config, runF, codeClose),
	}
	cmd.Flags().StringVar(&o.Session, "session", "", "session id (required)")
	_ = cmd.MarkFlagRequired("session")
	return cmd
}

func codeClose(o *CodeOptions) error {
	return o.withRunner(func(r *coderun.Runner, _ *progress.Reporter) error {
		s, err := r.Session(o.Session)
		if err != nil {
			return usageError{err}
		}
		return s.Close(o.Ctx)
	})
}

// NewCmdCodeSearch builds `code search`.
func NewCmdCodeSearch(f *Factory, config *string, runF func(*CodeOptions) error) *cobra.Command {
	o := &CodeOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "search QUERY...",
		Short: "Search the packages' docs (and a session's code modules); print JSON, best first",
		Example: "  sandboxctl code --config code.toml search parse a date\n" +
			"  sandboxctl code --config code.toml search --package zod -k 3 --fetch=false object schema",
		Args: cobra.MinimumNArgs(1),
		RunE: codeRunE(o, config, runF, codeSearch),
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Package, "package", "", "search only this package's docs")
	fl.StringVar(&o.Session, "session", "", "also search this session's code modules")
	fl.IntVarP(&o.K, "k", "k", 5, "how many results")
	fl.BoolVar(&o.Fetch, "fetch", true, "fetch and index the docs first (unchanged chunks are skipped)")
	return cmd
}

func codeSearch(o *CodeOptions) error {
	return o.withRunner(func(r *coderun.Runner, rep *progress.Reporter) error {
		if o.Fetch {
			if err := r.IndexDocs(o.Ctx); err != nil {
				rep.Step("some docs could not be indexed: %v", err)
			}
		}
		q := strings.Join(o.Args, " ")
		if o.Session == "" {
			res, err := r.Search(o.Ctx, q, o.Package, o.K)
			if err != nil {
				return err
			}
			return o.result(rep, res)
		}
		s, err := r.Session(o.Session)
		if err != nil {
			return usageError{err}
		}
		res, err := s.SearchDocs(o.Ctx, q, o.Package, o.K)
		if err != nil {
			return err
		}
		return o.result(rep, res)
	})
}

// NewCmdCodeSnapshot builds `code snapshot`.
func NewCmdCodeSnapshot(f *Factory, config *string, runF func(*CodeOptions) error) *cobra.Command {
	o := &CodeOptions{Factory: f}
	return &cobra.Command{
		Use:   "snapshot",
		Short: "Build the dependency snapshot, or show it when it exists; index the docs",
		Long: "Build the dependency snapshot of the config's packages (once per config: later\n" +
			"calls show it) and index their docs. The first build installs Deno and the packages\n" +
			"in a build sandbox; progress goes to stderr, a bar with the step and the elapsed\n" +
			"time on a terminal, plain lines otherwise.",
		Example: "  sandboxctl code --config code.toml snapshot",
		Args:    cobra.NoArgs,
		RunE:    codeRunE(o, config, runF, codeSnapshot),
	}
}

func codeSnapshot(o *CodeOptions) error {
	return o.withRunner(func(r *coderun.Runner, rep *progress.Reporter) error {
		info, err := r.EnsureSnapshot(o.Ctx)
		if err != nil {
			return err
		}
		if err := r.IndexDocs(o.Ctx); err != nil {
			rep.Step("some docs could not be indexed: %v", err)
		}
		return o.result(rep, info)
	})
}

// NewCmdCodeGC builds `code gc`.
func NewCmdCodeGC(f *Factory, config *string, runF func(*CodeOptions) error) *cobra.Command {
	o := &CodeOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "gc [--ttl DURATION]",
		Short: "Destroy idle sandboxes and delete volumes unused for volume_ttl_minutes, once",
		Example: "  sandboxctl code --config code.toml gc\n" +
			"  sandboxctl code --config code.toml gc --ttl 24h",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.TTL < 0 && cmd.Flags().Changed("ttl") {
				return usageError{errors.New("--ttl must not be negative")}
			}
			if !cmd.Flags().Changed("ttl") {
				o.TTL = coderun.ConfigTTL
			}
			return codeRunE(o, config, runF, codeGC)(cmd, args)
		},
	}
	cmd.Flags().DurationVar(&o.TTL, "ttl", 0, "delete volumes unused this long (default: volume_ttl_minutes)")
	return cmd
}

func codeGC(o *CodeOptions) error {
	return o.withRunner(func(r *coderun.Runner, rep *progress.Reporter) error {
		report, err := r.Cleanup(o.Ctx, time.Now(), o.TTL)
		if err != nil {
			return err
		}
		return o.result(rep, report)
	})
}

// NewCmdCodeMCP builds `code mcp`.
func NewCmdCodeMCP(f *Factory, config *string, runF func(*CodeOptions) error) *cobra.Command {
	o := &CodeOptions{Factory: f}
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve run_code, search_docs and save_code_modules as an MCP server over stdio",
		Example: "  sandboxctl code --config code.toml mcp\n" +
			"  npx @modelcontextprotocol/inspector sandboxctl code --config code.toml mcp",
		Args: cobra.NoArgs,
		RunE: codeRunE(o, config, runF, codeMCP),
	}
}

// codeMCP serves until stdin ends. It runs for the client's whole session, so
// its progress goes to stderr as plain lines, not as a bar.
func codeMCP(o *CodeOptions) error {
	a := o.Factory
	r, done, err := o.openRunner(a.stderr, 0, 1)
	if err != nil {
		return err
	}
	defer done()
	return r.ServeMCP(o.Ctx, io.NopCloser(a.stdin), nopCloser{a.stdout}, version.String())
}

// nopCloser is a WriteCloser whose Close leaves the stream open.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
