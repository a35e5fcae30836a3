package main

import (
	"fmt"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func newCmdCreate(a *app) *cobra.Command {
	var repos, envs []string
	var snapshot, session, tokenEnv string
	cmd := &cobra.Command{
		Use:   "create [--repo URL[#branch]]... [--token-env VAR] [--snapshot ID] [--env K=V]... [--session ID]",
		Short: "Create a sandbox and boot it with the platform's boot plan",
		Long: "Create a sandbox: clone the repos, write the boot plan's files, start sandbox-mcp\n" +
			"(and OpenCode and Caddy when installed), and print its id and URLs. Progress goes\n" +
			"to stderr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := provider.CreateOptions{SessionID: session, SnapshotID: snapshot, EnvVars: map[string]string{}}
			token, err := gitToken(a, tokenEnv)
			if err != nil {
				return err
			}
			if opts.SessionID == "" {
				opts.SessionID = "sandboxctl-" + time.Now().UTC().Format("20060102-150405")
			}
			for i, r := range repos {
				url, branch, _ := strings.Cut(r, "#")
				name := strings.TrimSuffix(path.Base(strings.TrimRight(url, "/")), ".git")
				if name == "" || name == "." || name == "/" {
					name = fmt.Sprintf("repo%d", i+1)
				}
				opts.Repos = append(opts.Repos, provider.RepoSpec{RepoURL: url, Token: token, Branch: branch, WorkspacePath: name})
			}
			for _, kv := range envs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError{errorf("--env %q: want KEY=VALUE", kv)}
				}
				opts.EnvVars[k] = v
			}
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			if b.Provider == nil {
				if len(repos) > 0 || session != "" {
					return errorf("provider %s cannot boot the platform's plan (--repo, --session)", a.provider)
				}
				spec := engine.Spec{Snapshot: snapshot}
				for k, v := range opts.EnvVars {
					spec.Env = append(spec.Env, k+"="+v)
				}
				info, err := b.Engine.Create(cmd.Context(), spec)
				if err != nil {
					return err
				}
				if a.json {
					return a.printJSON(info)
				}
				fmt.Fprintln(a.stdout, info.ID)
				return nil
			}
			start := time.Now()
			res, err := b.Provider.CreateSandbox(cmd.Context(), opts)
			if err != nil {
				return err
			}
			a.progress("created %s in %v", res.SandboxID, time.Since(start).Round(time.Millisecond))
			if err := writeGitRecord(a.dataDir, res.SandboxID, opts.Repos); err != nil {
				a.progress("warning: %v (push and sync will need --remote)", err)
			}
			if a.json {
				return a.printJSON(res)
			}
			fmt.Fprintln(a.stdout, res.SandboxID)
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			for _, kv := range [][2]string{{"sandbox-mcp", res.SandboxMCPURL}, {"opencode", res.TunnelURL}, {"preview", res.PreviewURL}} {
				if kv[1] != "" {
					fmt.Fprintf(tw, "  %s\t%s\n", kv[0], kv[1])
				}
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&repos, "repo", nil, "git repository to clone, URL[#branch] (repeatable)")
	f.StringVar(&snapshot, "snapshot", "", "start from this snapshot")
	f.StringArrayVar(&envs, "env", nil, "environment variable KEY=VALUE for the sandbox (repeatable)")
	f.StringVar(&session, "session", "", "session id (default: generated)")
	f.StringVar(&tokenEnv, "token-env", "", "environment variable holding the git token of the --repo URLs (used on the host only)")
	return cmd
}

func newCmdList(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List sandboxes, dead ones included until terminated",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			list, err := b.Engine.List(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				if list == nil {
					list = []engine.Info{}
				}
				return a.printJSON(list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tNAME")
			for _, i := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", i.ID, i.State, i.Created.Local().Format(time.DateTime), i.Name)
			}
			return tw.Flush()
		},
	}
}

func newCmdExec(a *app) *cobra.Command {
	var cwd string
	var envs []string
	var timeout time.Duration
	var stdin, tty bool
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- ARGV...",
		Short: "Run a command in a sandbox; exit with its exit code",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			req := engine.ExecRequest{Argv: args[1:], Cwd: cwd, Env: envs, Timeout: timeout,
				Stdout: a.stdout, Stderr: a.stderr}
			resize := make(chan engine.WindowSize, 1)
			if stdin || tty {
				req.Stdin = a.stdin
			}
			if tty {
				req.TTY = true
				stop := a.terminalSetup(cmd.Context(), func(ws engine.WindowSize) {
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
			code, err := b.Engine.Exec(cmd.Context(), args[0], req)
			if err != nil && code != 124 {
				return err
			}
			if err != nil {
				fmt.Fprintln(a.stderr, "Error:", err)
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cwd, "cwd", "", "working directory inside (default: the home directory)")
	f.StringArrayVar(&envs, "env", nil, "extra environment variable KEY=VALUE (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (exit code 124)")
	f.BoolVarP(&stdin, "interactive", "i", false, "pass stdin to the command")
	f.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal (raw mode and resizes when stdin is one; implies -i)")
	return cmd
}

// sandboxPath splits ID:/path; ok is false for a local path.
func sandboxPath(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || !strings.HasPrefix(p, "/") || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

func newCmdCp(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file or directory between the host and a sandbox (ID:/path; - is stdin/stdout)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcIn := sandboxPath(args[0])
			dstID, dstPath, dstIn := sandboxPath(args[1])
			if srcIn == dstIn {
				return usageError{errorf("cp: exactly one of SRC and DST must be ID:/path")}
			}
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			ctx := cmd.Context()
			if srcIn {
				return copyOut(ctx, b.Engine, srcID, srcPath, args[1], a.stdout)
			}
			return copyIn(ctx, b.Engine, args[0], dstID, dstPath, a.stdin)
		},
	}
}

func newCmdSnapshot(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox's writable state; print the snapshot id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			a.progress("snapshotting %s", args[0])
			id, err := b.Engine.Snapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]string{"snapshotId": id})
			}
			fmt.Fprintln(a.stdout, id)
			return nil
		},
	}
}

func newCmdPause(a *app, pause bool) *cobra.Command {
	use, short := "resume ID", "Resume a paused sandbox"
	if pause {
		use, short = "pause ID", "Freeze every process of a sandbox"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			f := b.Engine.Resume
			if pause {
				f = b.Engine.Pause
			}
			if err := f(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.printState(cmd, b, args[0])
		},
	}
}

func (a *app) printState(cmd *cobra.Command, b openedBackend, id string) error {
	info, err := b.Engine.Get(cmd.Context(), id)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(info)
	}
	fmt.Fprintf(a.stdout, "%s %s\n", info.ID, info.State)
	return nil
}

func newCmdTerminate(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "terminate ID...",
		Short: "Terminate sandboxes: kill every process, remove mounts, tunnels and state",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			for _, id := range args {
				if b.Provider != nil {
					err = b.Provider.Terminate(cmd.Context(), "", id)
				} else {
					err = b.Engine.Terminate(cmd.Context(), id)
				}
				if err != nil {
					return err
				}
				removeGitRecord(a.dataDir, id)
				if !a.json {
					fmt.Fprintf(a.stdout, "%s terminated\n", id)
				}
			}
			if a.json {
				return a.printJSON(map[string][]string{"terminated": args})
			}
			return nil
		},
	}
}

// tunnelView is a tunnel as printed.
type tunnelView struct {
	engine.Tunnel
	URL string `json:"url"`
}

func newCmdTunnels(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "tunnels ID",
		Short: "List a sandbox's tunnels: port inside and URL on the host",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.open(cmd.Context(), "")
			if err != nil {
				return err
			}
			defer b.close()
			info, err := b.Engine.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			views := []tunnelView{}
			for _, t := range info.Tunnels {
				views = append(views, tunnelView{t, fmt.Sprintf("http://%s", hostPort(t))})
			}
			if a.json {
				return a.printJSON(views)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PORT\tURL")
			for _, v := range views {
				fmt.Fprintf(tw, "%d\t%s\n", v.Port, v.URL)
			}
			return tw.Flush()
		},
	}
}

func hostPort(t engine.Tunnel) string {
	if strings.Contains(t.Host, ":") {
		return fmt.Sprintf("[%s]:%d", t.Host, t.HostPort)
	}
	return fmt.Sprintf("%s:%d", t.Host, t.HostPort)
}
