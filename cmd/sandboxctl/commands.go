package main

// The commands over one sandbox of the engine. Each is NewCmdX(f, runF): the RunE
// parses and validates into XOptions, then calls runF (a test's) or xRun, which
// goes through withBackend, the one open-call-print.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// IDOptions are the inputs of the commands on one sandbox id (snapshot, pause,
// resume, tunnels).
type IDOptions struct {
	Ctx     context.Context
	Factory *Factory
	ID      string
}

// IDsOptions are the inputs of terminate.
type IDsOptions struct {
	Ctx     context.Context
	Factory *Factory
	IDs     []string
}

// ListOptions are the inputs of list.
type ListOptions struct {
	Ctx     context.Context
	Factory *Factory
}

// runOr calls runF with o when set, else run.
func runOr[T any](o *T, runF, run func(*T) error) error {
	if runF != nil {
		return runF(o)
	}
	return run(o)
}

// NewCmdList builds `list`.
func NewCmdList(f *Factory, runF func(*ListOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List sandboxes, dead ones included until terminated",
		Example: "  sandboxctl list\n  sandboxctl -p modal list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(&ListOptions{Ctx: cmd.Context(), Factory: f}, runF, listRun)
		},
	}
}

func listRun(o *ListOptions) error {
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) ([]listEntry, error) {
		list, err := b.Engine.List(ctx)
		return listEntries(ctx, b.Engine, list), err
	}, func(w io.Writer, list []listEntry) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tNAME")
		for _, i := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", i.ID, i.State, i.Created.Local().Format(time.DateTime), i.Name)
		}
		return tw.Flush()
	})
}

// ExecOptions are the inputs of exec.
type ExecOptions struct {
	Ctx     context.Context
	Factory *Factory
	ID      string
	Argv    []string
	Cwd     string
	Env     []string
	Timeout time.Duration
	Stdin   bool
	TTY     bool
}

// NewCmdExec builds `exec`.
func NewCmdExec(f *Factory, runF func(*ExecOptions) error) *cobra.Command {
	o := &ExecOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- ARGV...",
		Short: "Run a command in a sandbox; exit with its exit code",
		Example: "  sandboxctl exec \"$ID\" -- ls -la workspace\n" +
			"  sandboxctl exec \"$ID\" --cwd /tmp --env DEBUG=1 --timeout 30s -- make test\n" +
			"  sandboxctl exec -it \"$ID\" -- bash",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx, o.ID, o.Argv = cmd.Context(), args[0], args[1:]
			for _, kv := range o.Env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usageError{errorf("--env %q: want KEY=VALUE", kv)}
				}
			}
			return runOr(o, runF, execRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Cwd, "cwd", "", "working directory inside (default: the home directory)")
	fl.StringArrayVar(&o.Env, "env", nil, "extra environment variable KEY=VALUE (repeatable)")
	fl.DurationVar(&o.Timeout, "timeout", 0, "kill the command after this long (exit code 124)")
	fl.BoolVarP(&o.Stdin, "interactive", "i", false, "pass stdin to the command")
	fl.BoolVarP(&o.TTY, "tty", "t", false, "run the command on a terminal (raw mode and resizes when stdin is one; implies -i)")
	return cmd
}

// execRun streams the command's output; its exit code becomes sandboxctl's.
func execRun(o *ExecOptions) error {
	f := o.Factory
	b, err := f.open(o.Ctx, "")
	if err != nil {
		return err
	}
	defer b.close()
	req := engine.ExecRequest{Argv: o.Argv, Cwd: o.Cwd, Env: o.Env, Timeout: o.Timeout, Stdout: f.stdout, Stderr: f.stderr}
	resize := make(chan engine.WindowSize, 1)
	if o.Stdin || o.TTY {
		req.Stdin = f.stdin
	}
	if o.TTY {
		req.TTY = true
		stop := f.terminalSetup(o.Ctx, func(ws engine.WindowSize) {
			if req.Size == (engine.WindowSize{}) {
				req.Size = ws
				return
			}
			select {
			case resize <- ws:
			default:
			}
		})
		defer stop()
		req.Resize = resize
	}
	code, err := b.Engine.Exec(o.Ctx, resolveSandbox(o.Ctx, b.Engine, o.ID), req)
	if err != nil && code != 124 {
		return err
	}
	if err != nil {
		fmt.Fprintln(f.stderr, "Error:", err)
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// sandboxPath splits ID:/path; ok is false for a local path.
func sandboxPath(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || !strings.HasPrefix(p, "/") || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

// CpOptions are the inputs of cp: exactly one side is in a sandbox.
type CpOptions struct {
	Ctx     context.Context
	Factory *Factory
	// ID is the sandbox; Out says it is the source (copy out), else the destination.
	ID  string
	Out bool
	// Src and Dst are the paths, the sandbox's without its ID: prefix.
	Src, Dst string
}

// NewCmdCp builds `cp`.
func NewCmdCp(f *Factory, runF func(*CpOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file or directory between the host and a sandbox (ID:/path; - is stdin/stdout)",
		Example: "  sandboxctl cp ./src \"$ID\":/home/user/workspace/src\n" +
			"  sandboxctl cp \"$ID\":/etc/os-release -",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcIn := sandboxPath(args[0])
			dstID, dstPath, dstIn := sandboxPath(args[1])
			if srcIn == dstIn {
				return usageError{errorf("cp: exactly one of SRC and DST must be ID:/path")}
			}
			o := &CpOptions{Ctx: cmd.Context(), Factory: f, ID: dstID, Src: args[0], Dst: dstPath}
			if srcIn {
				o.ID, o.Out, o.Src, o.Dst = srcID, true, srcPath, args[1]
			}
			return runOr(o, runF, cpRun)
		},
	}
}

func cpRun(o *CpOptions) error {
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) (struct{}, error) {
		o.ID = resolveSandbox(ctx, b.Engine, o.ID)
		if o.Out {
			return struct{}{}, copyOut(ctx, b.Engine, o.ID, o.Src, o.Dst, o.Factory.stdout)
		}
		return struct{}{}, copyIn(ctx, b.Engine, o.Src, o.ID, o.Dst, o.Factory.stdin)
	}, nil)
}

// idCmd is a command on one sandbox id.
func idCmd(f *Factory, use, short string, runF, run func(*IDOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(&IDOptions{Ctx: cmd.Context(), Factory: f, ID: args[0]}, runF, run)
		},
	}
}

// NewCmdSnapshot builds `snapshot`.
func NewCmdSnapshot(f *Factory, runF func(*IDOptions) error) *cobra.Command {
	cmd := idCmd(f, "snapshot ID", "Snapshot a sandbox's writable state; print the snapshot id", runF, snapshotRun)
	cmd.Example = "  SNAP=$(sandboxctl snapshot \"$ID\")\n  sandboxctl create --snapshot \"$SNAP\""
	return cmd
}

type snapshotView struct {
	SnapshotID string `json:"snapshotId"`
}

func snapshotRun(o *IDOptions) error {
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) (snapshotView, error) {
		if err := b.Provider.RefuseBastion(ctx, o.ID, provider.OpSnapshot); err != nil {
			return snapshotView{}, err
		}
		o.Factory.progress("snapshotting %s", o.ID)
		id, err := b.Engine.Snapshot(ctx, o.ID)
		return snapshotView{id}, err
	}, func(w io.Writer, v snapshotView) error {
		_, err := fmt.Fprintln(w, v.SnapshotID)
		return err
	})
}

// NewCmdPause builds `pause` (pause true) or `resume`.
func NewCmdPause(f *Factory, pause bool, runF func(*IDOptions) error) *cobra.Command {
	if pause {
		cmd := idCmd(f, "pause ID", "Freeze every process of a sandbox", runF, func(o *IDOptions) error { return pauseRun(o, true) })
		cmd.Example = "  sandboxctl pause \"$ID\"\n  sandboxctl resume \"$ID\""
		return cmd
	}
	cmd := idCmd(f, "resume ID", "Resume a paused sandbox", runF, func(o *IDOptions) error { return pauseRun(o, false) })
	cmd.Example = "  sandboxctl resume \"$ID\""
	return cmd
}

func pauseRun(o *IDOptions, pause bool) error {
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) (engine.Info, error) {
		o.ID = resolveSandbox(ctx, b.Engine, o.ID)
		if handled, err := pausePair(ctx, b, o.ID, pause); handled || err != nil {
			if err != nil {
				return engine.Info{}, err
			}
			return b.Engine.Get(ctx, o.ID)
		}
		f := b.Engine.Resume
		if pause {
			f = b.Engine.Pause
		}
		if err := f(ctx, o.ID); err != nil {
			return engine.Info{}, err
		}
		return b.Engine.Get(ctx, o.ID)
	}, func(w io.Writer, info engine.Info) error {
		_, err := fmt.Fprintf(w, "%s %s\n", info.ID, info.State)
		return err
	})
}

// NewCmdTerminate builds `terminate`.
func NewCmdTerminate(f *Factory, runF func(*IDsOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "terminate ID...",
		Short:   "Terminate sandboxes: kill every process, remove mounts, tunnels and state",
		Example: "  sandboxctl terminate \"$ID\"\n  sandboxctl terminate $(sandboxctl list --json | jq -r '.[].id')",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(&IDsOptions{Ctx: cmd.Context(), Factory: f, IDs: args}, runF, terminateRun)
		},
	}
}

type terminatedView struct {
	Terminated []string `json:"terminated"`
}

func terminateRun(o *IDsOptions) error {
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) (terminatedView, error) {
		for _, id := range o.IDs {
			var err error
			if b.Provider != nil {
				err = b.Provider.Terminate(ctx, "", id)
			} else {
				err = b.Engine.Terminate(ctx, id)
			}
			if err != nil {
				return terminatedView{}, err
			}
			removeGitRecord(o.Factory.dataDir, id)
			if !o.Factory.json {
				fmt.Fprintf(o.Factory.stdout, "%s terminated\n", id)
			}
		}
		return terminatedView{o.IDs}, nil
	}, nil)
}

// tunnelView is a tunnel as printed.
type tunnelView struct {
	engine.Tunnel
	URL string `json:"url"`
}

// NewCmdTunnels builds `tunnels`.
func NewCmdTunnels(f *Factory, runF func(*IDOptions) error) *cobra.Command {
	cmd := idCmd(f, "tunnels ID", "List a sandbox's tunnels: port inside and URL on the host", runF, tunnelsRun)
	cmd.Example = "  sandboxctl tunnels \"$ID\"\n  sandboxctl tunnels \"$ID\" --json"
	return cmd
}

func tunnelsRun(o *IDOptions) error {
	return withBackend(o.Ctx, o.Factory, func(ctx context.Context, b openedBackend) ([]tunnelView, error) {
		info, err := b.Engine.Get(ctx, o.ID)
		views := []tunnelView{}
		for _, t := range info.Tunnels {
			views = append(views, tunnelView{t, fmt.Sprintf("http://%s", hostPort(t))})
		}
		return views, err
	}, func(w io.Writer, views []tunnelView) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PORT\tURL")
		for _, v := range views {
			fmt.Fprintf(tw, "%d\t%s\n", v.Port, v.URL)
		}
		return tw.Flush()
	})
}

func hostPort(t engine.Tunnel) string {
	if strings.Contains(t.Host, ":") {
		return fmt.Sprintf("[%s]:%d", t.Host, t.HostPort)
	}
	return fmt.Sprintf("%s:%d", t.Host, t.HostPort)
}
