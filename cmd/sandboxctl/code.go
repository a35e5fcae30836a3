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
)

// codeOptions are the flags every `code` subcommand shares.
type codeOptions struct {
	config string
}

func newCmdCode(a *Factory) *cobra.Command {
	o := &codeOptions{}
	cmd := &cobra.Command{
		Use:   "code",
		Short: "Run TypeScript for models in sandboxes: run_code, search_docs, save_code_modules",
		Long: "Code execution for models: TypeScript run by Deno in a session's sandbox against the npm\n" +
			"packages of the [sandbox] section of a TOML config (--config), their docs searchable.\n" +
			"A session's sandbox outlives one call: calls with the same --session share variables.",
	}
	cmd.PersistentFlags().StringVar(&o.config, "config", "", "TOML file with the [sandbox] section (required)")
	_ = cmd.MarkPersistentFlagRequired("config")
	cmd.AddCommand(newCmdCodeRun(a, o), newCmdCodeClose(a, o), newCmdCodeSearch(a, o), newCmdCodeSnapshot(a, o),
		newCmdCodeGC(a, o), newCmdCodeMCP(a, o))
	return cmd
}

// openRunner loads the config and opens the runner on the provider's engine. The
// close ends both.
// reap is Options.ReapEvery and spares Options.Spares.
func (o *codeOptions) openRunner(cmd *cobra.Command, a *Factory, reap time.Duration, spares int) (*coderun.Runner, func(), error) {
	cfg, err := coderun.LoadFile(o.config, a.getenv)
	if err != nil {
		return nil, nil, err
	}
	if !cfg.Enabled {
		return nil, nil, fmt.Errorf("%s: %w", o.config, coderun.ErrOff)
	}
	provider := cfg.Provider
	if cmd.Flags().Changed("provider") {
		provider = a.provider
	}
	eng, images, closeEng, err := a.codeEngine(cmd.Context(), provider)
	if err != nil {
		return nil, nil, err
	}
	ro := coderun.Options{Config: cfg, Engine: eng, DataDir: filepath.Join(a.dataDir, "coderun"),
		Progress: a.stderr, Logger: a.logger(), ReapEvery: reap, Spares: spares}
	if images != nil {
		ro.Images = images // a nil *store.Store would be a non-nil ImageStore
	}
	r, err := coderun.New(cmd.Context(), ro)
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
		return nil, nil, nil, fmt.Errorf("%w\nsandboxctl --unisolated runs sandboxes as plain host processes, without isolation", err)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return e, images, func() { e.Close() }, nil
}

// withRunner is a RunE that opens the session runner (no idle reaper, no spare
// sandboxes: one call of a CLI command), runs fn with it and closes it.
func (o *codeOptions) withRunner(a *Factory, fn func(cmd *cobra.Command, args []string, r *coderun.Runner) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		r, done, err := o.openRunner(cmd, a, -1, 0)
		if err != nil {
			return err
		}
		defer done()
		return fn(cmd, args, r)
	}
}

func newCmdCodeRun(a *Factory, o *codeOptions) *cobra.Command {
	var session, description string
	cmd := &cobra.Command{
		Use:   "run --session S [FILE|-]",
		Short: "Run TypeScript in a session and print the JSON result; exit 1 when it failed",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := readCode(a.stdin, args)
			if err != nil {
				return err
			}
			r, done, err := o.openRunner(cmd, a, -1, 0)
			if err != nil {
				return err
			}
			defer done()
			if _, err := r.ReapIdle(cmd.Context(), time.Now()); err != nil {
				return err
			}
			s, err := r.Session(session)
			if err != nil {
				return usageError{err}
			}
			res, err := s.RunCode(cmd.Context(), code, description)
			if err != nil {
				return err
			}
			if err := a.printJSON(res); err != nil {
				return err
			}
			if !res.Success {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "session id (required)")
	cmd.Flags().StringVar(&description, "description", "", "what the code does (logged)")
	_ = cmd.MarkFlagRequired("session")
	return cmd
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

func newCmdCodeClose(a *Factory, o *codeOptions) *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use:   "close --session S",
		Short: "Destroy a session's sandbox; its volume stays until gc",
		Args:  cobra.NoArgs,
		RunE: o.withRunner(a, func(cmd *cobra.Command, args []string, r *coderun.Runner) error {
			s, err := r.Session(session)
			if err != nil {
				return usageError{err}
			}
			return s.Close(cmd.Context())
		}),
	}
	cmd.Flags().StringVar(&session, "session", "", "session id (required)")
	_ = cmd.MarkFlagRequired("session")
	return cmd
}

func newCmdCodeSearch(a *Factory, o *codeOptions) *cobra.Command {
	var pkg, session string
	var k int
	var fetch bool
	cmd := &cobra.Command{
		Use:   "search QUERY...",
		Short: "Search the packages' docs (and a session's code modules); print JSON, best first",
		Args:  cobra.MinimumNArgs(1),
		RunE: o.withRunner(a, func(cmd *cobra.Command, args []string, r *coderun.Runner) error {
			if fetch {
				if err := r.IndexDocs(cmd.Context()); err != nil {
					a.progress("some docs could not be indexed: %v", err)
				}
			}
			q := strings.Join(args, " ")
			if session == "" {
				res, err := r.Search(cmd.Context(), q, pkg, k)
				if err != nil {
					return err
				}
				return a.printJSON(res)
			}
			s, err := r.Session(session)
			if err != nil {
				return usageError{err}
			}
			res, err := s.SearchDocs(cmd.Context(), q, pkg, k)
			if err != nil {
				return err
			}
			return a.printJSON(res)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&pkg, "package", "", "search only this package's docs")
	f.StringVar(&session, "session", "", "also search this session's code modules")
	f.IntVarP(&k, "k", "k", 5, "how many results")
	f.BoolVar(&fetch, "fetch", true, "fetch and index the docs first (unchanged chunks are skipped)")
	return cmd
}

func newCmdCodeSnapshot(a *Factory, o *codeOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot",
		Short: "Build the dependency snapshot, or show it when it exists; index the docs",
		Args:  cobra.NoArgs,
		RunE: o.withRunner(a, func(cmd *cobra.Command, args []string, r *coderun.Runner) error {
			info, err := r.EnsureSnapshot(cmd.Context())
			if err != nil {
				return err
			}
			if err := r.IndexDocs(cmd.Context()); err != nil {
				a.progress("some docs could not be indexed: %v", err)
			}
			return a.printJSON(info)
		}),
	}
}

func newCmdCodeGC(a *Factory, o *codeOptions) *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "gc [--ttl DURATION]",
		Short: "Destroy idle sandboxes and delete volumes unused for volume_ttl_minutes, once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < 0 {
				return usageError{errors.New("--ttl must not be negative")}
			}
			r, done, err := o.openRunner(cmd, a, -1, 0)
			if err != nil {
				return err
			}
			defer done()
			if !cmd.Flags().Changed("ttl") {
				ttl = coderun.ConfigTTL
			}
			rep, err := r.Cleanup(cmd.Context(), time.Now(), ttl)
			if err != nil {
				return err
			}
			return a.printJSON(rep)
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "delete volumes unused this long (default: volume_ttl_minutes)")
	return cmd
}

func newCmdCodeMCP(a *Factory, o *codeOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve run_code, search_docs and save_code_modules as an MCP server over stdio",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, done, err := o.openRunner(cmd, a, 0, 1)
			if err != nil {
				return err
			}
			defer done()
			return r.ServeMCP(cmd.Context(), io.NopCloser(a.stdin), nopCloser{a.stdout}, version.String())
		},
	}
}

// nopCloser is a WriteCloser whose Close leaves the stream open.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
