package main

// push and sync: tokenless git (docs/git-bundle.md). The sandbox never holds a
// git token; sandboxctl fetches and pushes for it from the host, through a
// mirror under --data-dir/git-mirrors, with the token read from an environment
// variable and given only to the git process that talks to the remote. The
// remote is --remote or the host's record of the repo (gitrecord.go), never
// what the sandbox says its origin is.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// gitFlags are the flags push and sync share: --remote, --token-env, --repo.
type gitFlags struct {
	remote, tokenEnv, repo string
}

func (g *gitFlags) add(cmd *cobra.Command, remoteHelp string) {
	f := cmd.Flags()
	f.StringVar(&g.remote, "remote", "", remoteHelp)
	f.StringVar(&g.tokenEnv, "token-env", "", "environment variable holding the git token (never passed to the sandbox)")
	f.StringVar(&g.repo, "repo", "", "the sandbox repo (its path, or the last part of it) when the workspace has several")
}

// gitTarget is one repo of one sandbox, reached through its sidecar, and
// the remote the host knows for it.
type gitTarget struct {
	sc      *sidecar.Client
	repo    apitype.GitRepo
	mirrors *gitpush.Mirrors
	token   string
	remote  string
}

// gitToken reads the git token from the variable --token-env names ("" when none).
func gitToken(a *Factory, tokenEnv string) (string, error) {
	if tokenEnv == "" {
		return "", nil
	}
	token := a.getenv(tokenEnv)
	if token == "" {
		return "", errorf("--token-env %s: the variable is empty or unset", tokenEnv)
	}
	return token, nil
}

func (a *Factory) gitTarget(ctx context.Context, b openedBackend, id string, g gitFlags) (gitTarget, error) {
	var t gitTarget
	var err error
	if t.token, err = gitToken(a, g.tokenEnv); err != nil {
		return t, err
	}
	if b.Sidecar == nil {
		return t, errorf("provider %s cannot reach a sandbox's sidecar", a.provider)
	}
	u, tok, err := b.Sidecar(ctx, id)
	if err != nil {
		return t, err
	}
	if t.sc, err = sidecar.New(sidecar.Options{BaseURL: u, Token: tok, Retries: -1}); err != nil {
		return t, err
	}
	repos, err := t.sc.GitRepos(ctx)
	if err != nil {
		return t, fmt.Errorf("list the sandbox's repos: %w", err)
	}
	var match []apitype.GitRepo
	for _, r := range repos {
		if g.repo == "" || r.Path == g.repo || strings.HasSuffix(r.Path, "/"+strings.Trim(g.repo, "/")) {
			match = append(match, r)
		}
	}
	if len(match) != 1 {
		var paths []string
		for _, r := range repos {
			paths = append(paths, r.Path)
		}
		if len(match) == 0 {
			return t, errorf("no repo %q in sandbox %s (repos: %s)", g.repo, id, strings.Join(paths, ", "))
		}
		return t, usageError{errorf("sandbox %s has several repos (%s): choose one with --repo", id, strings.Join(paths, ", "))}
	}
	t.repo = match[0]
	if t.remote = g.remote; t.remote == "" {
		rec, err := readGitRecord(a.dataDir, id)
		if err != nil {
			return t, err
		}
		if t.remote = rec.remoteFor(t.repo.Path); t.remote == "" {
			return t, usageError{errorf("sandbox %s: the host has no record of a remote for %s (only repos sandboxctl create cloned are recorded): give --remote", id, t.repo.Path)}
		}
	}
	t.mirrors, err = gitpush.New(gitpush.Options{CacheDir: filepath.Join(a.dataDir, "git-mirrors")})
	return t, err
}

// PushOptions are the inputs of `push` and `sync`.
type PushOptions struct {
	Ctx     context.Context
	Factory *Factory
	// ID is the sandbox.
	ID string
	// Git holds --remote, --token-env and --repo.
	Git gitFlags
	// Session is push's --session; empty means the sandbox's session label.
	Session string
}

// NewCmdPush builds `push`.
func NewCmdPush(f *Factory, runF func(*PushOptions) error) *cobra.Command {
	o := &PushOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "push ID [--remote URL] [--token-env VAR] [--session S] [--repo PATH]",
		Short: "Push a sandbox's branch to session/<sessionId> of the remote, from the host",
		Long: "Push the current branch of a sandbox repo to refs/heads/session/<sessionId> of the\n" +
			"remote. The sandbox hands over a git bundle; the host checks it against its mirror\n" +
			"(fsck, fast-forward only, no .git paths, no secrets such as .env or id_rsa, size\n" +
			"caps) and pushes with the token from --token-env. No other ref of the remote is\n" +
			"ever written. The remote is --remote, else the URL the repo was created from (the\n" +
			"host's record, never the sandbox's origin). Exit 1 when refused.",
		Example: "  GITHUB_TOKEN=… sandboxctl push \"$ID\" --token-env GITHUB_TOKEN\n" +
			"  sandboxctl push \"$ID\" --session s42 --repo web --remote https://github.com/org/web.git",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx, o.ID = cmd.Context(), args[0]
			return runOr(o, runF, pushRun)
		},
	}
	o.Git.add(cmd, "remote URL to push to (http or https, no credentials in it; default: the URL the repo was created from)")
	cmd.Flags().StringVar(&o.Session, "session", "", "session id (default: the sandbox's session label)")
	return cmd
}

func pushRun(o *PushOptions) error {
	a, ctx, session := o.Factory, o.Ctx, o.Session
	b, err := a.open(ctx, "")
	if err != nil {
		return err
	}
	defer b.close()
	if session == "" {
		info, err := b.Engine.Get(ctx, o.ID)
		if err != nil {
			return err
		}
		if session = info.Labels["session"]; session == "" {
			return usageError{errorf("sandbox %s has no session label: give --session", o.ID)}
		}
	}
	t, err := a.gitTarget(ctx, b, o.ID, o.Git)
	if err != nil {
		return err
	}
	res, err := t.mirrors.PushSandbox(ctx, t.sc, t.repo.ID, gitpush.Remote{URL: t.remote, Token: t.token}, session)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(res)
	}
	if res.UpToDate {
		fmt.Fprintf(a.stdout, "%s is up to date\n", res.Ref)
		return nil
	}
	fmt.Fprintf(a.stdout, "pushed %s to %s (%d new commits)\n", res.SHA, res.Ref, res.Commits)
	return nil
}

// NewCmdSync builds `sync`.
func NewCmdSync(f *Factory, runF func(*PushOptions) error) *cobra.Command {
	o := &PushOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "sync ID [--remote URL] [--token-env VAR] [--repo PATH]",
		Short: "Bring a sandbox's origin/<branch> up to date, fetching on the host",
		Long: "Fetch the remote on the host (with the token from --token-env) and hand the sandbox\n" +
			"a bundle of what its current branch's origin/<branch> lacks. The sandbox's own\n" +
			"branches and work tree do not move; it merges or rebases itself. The remote is\n" +
			"--remote, else the URL the repo was created from (the host's record, never the\n" +
			"sandbox's origin).",
		Example: "  GITHUB_TOKEN=… sandboxctl sync \"$ID\" --token-env GITHUB_TOKEN\n" +
			"  sandboxctl exec \"$ID\" -- git -C workspace/web rebase origin/main",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx, o.ID = cmd.Context(), args[0]
			return runOr(o, runF, syncRun)
		},
	}
	o.Git.add(cmd, "remote URL to fetch (default: the URL the repo was created from; never the sandbox's origin)")
	return cmd
}

func syncRun(o *PushOptions) error {
	a, ctx := o.Factory, o.Ctx
	b, err := a.open(ctx, "")
	if err != nil {
		return err
	}
	defer b.close()
	t, err := a.gitTarget(ctx, b, o.ID, o.Git)
	if err != nil {
		return err
	}
	res, err := t.mirrors.SyncSandbox(ctx, t.sc, t.repo.ID, gitpush.Remote{URL: t.remote, Token: t.token})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(res)
	}
	if res.UpToDate {
		fmt.Fprintf(a.stdout, "origin/%s is up to date at %s\n", res.Branch, res.SHA)
		return nil
	}
	fmt.Fprintf(a.stdout, "origin/%s is now %s\n", res.Branch, res.SHA)
	return nil
}
