// Package gitctl is the bastion controller's git gate (model C,
// docs/bastion.md). The agent sandbox holds no git credential and, ideally,
// no git directory it can write; it asks the gate, over the link between the
// two sandboxes, to run one of the seed's commands in the shared workspace:
// status, diff, add, commit, push HEAD:refs/heads/session/<id>, fetch, log.
// Everything else is denied with a reason.
//
// # Protocol
//
// HTTP, usually over a unix socket on the shared volume (Serve) or the
// engine's dial: POST /v1/git with {"args": ["status", "--short"]}. The
// answer is 200 with {"exitCode", "stdout", "stderr", "truncated"} when git
// ran (a non-zero exit is git's answer, not the gate's), 403 {"error"} when
// the gate denies the request, 400 for a body that is not the request, 500
// when the gate could not run git.
//
// # What keeps the controller safe
//
//   - Arguments are validated once, where they enter (Parse), against an
//     allowlist per verb: no global options (-c, -C, --git-dir, --work-tree),
//     no option that runs a program or touches a file outside the repository
//     (--exec, --upload-pack, --receive-pack, --output, --ext-diff, -F, …),
//     paths relative and inside the workspace, revisions of a strict shape.
//   - git runs through gitexec (scrubbed environment, process group,
//     timeout, hooks off with core.hooksPath=/dev/null, no fsmonitor, no
//     pager) with GIT_DIR and GIT_WORK_TREE set by the gate, and with no
//     global or system configuration.
//   - The repository's own configuration is read before every command and
//     must hold only harmless keys (Config.GitDir's config may be written by
//     the agent when it lies on the shared volume): a filter, a textconv, an
//     include, an alias or a hooks path there makes the gate refuse to run.
//     Because the agent could change the file between that check and git's
//     read, the safe deployment keeps the git directory on the controller's
//     own disk (Config.GitDir outside the workspace); the check then guards
//     against mistakes rather than an attacker.
//   - push and fetch never use the repository's remotes: the gate names the
//     configured URL itself, pushes only HEAD to refs/heads/session/<id>
//     (no force) after a fetch and model B's deny globs over every path the
//     new commits touch (gitpush.Policy), and adds the credential through git's environment
//     (GIT_CONFIG_COUNT, an http.<url>.extraHeader scoped to that URL):
//     never in argv, a file, the workspace's .git/config or a log.
//   - Commands are serialised with a flock on a file of the shared volume
//     (rules.BastionGitLockFile in the git directory), so that several gates
//     or a cooperating git on the agent's side never race for index.lock.
package gitctl

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/proliferate-ai/sandbox-mcp/gitexec"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Remote is where push and fetch go, and the credential for it.
type Remote struct {
	// URL is an http(s) URL without credentials; required.
	URL string
	// Token is the password sent with Username (as GitHub's x-access-token);
	// empty sends no credential.
	Token string
	// Username defaults to gitpush.DefaultUsername.
	Username string
}

// Config configures a Gate.
type Config struct {
	// Workspace is the work tree on the shared volume; required.
	Workspace string
	// GitDir is the repository; default Workspace/.git. Keep it outside the
	// workspace, on the controller's own disk, where the agent cannot write.
	GitDir string
	// LockFile is the file flocked around every command; default
	// GitDir/rules.BastionGitLockFile. It must lie on a volume both
	// sandboxes see for the agent's own git to take part.
	LockFile string
	// SessionID names the only branch a push writes; required.
	SessionID string
	// Remote is where push and fetch go; required.
	Remote Remote
	// UserName and UserEmail are the committer, when set (otherwise the
	// repository's user.name and user.email).
	UserName, UserEmail string
	// DenyGlobs are the file names a push refuses, as gitpush.Policy's; nil
	// means gitpush.DefaultDenyGlobs, an empty non-nil slice denies nothing.
	DenyGlobs []string
	// Git is the git binary; default "git" on PATH.
	Git string
	// Timeout bounds each command; default gitexec.DefaultTimeout.
	Timeout time.Duration
	// Logger receives one line per command; default discards. No
	// credential is ever logged.
	Logger *slog.Logger
}

// Gate runs the allowed git commands. Safe for concurrent use.
type Gate struct {
	cfg    Config
	git    *gitexec.Runner
	log    *slog.Logger
	lock   *lockedfile.Mutex
	header string // "Authorization: Basic …", or ""
}

// New checks cfg and returns a Gate.
func New(cfg Config) (*Gate, error) {
	if cfg.Workspace == "" {
		return nil, errors.New("gitctl: Workspace is required")
	}
	ws, err := filepath.Abs(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("gitctl: workspace: %w", err)
	}
	cfg.Workspace = ws
	if cfg.GitDir == "" {
		cfg.GitDir = filepath.Join(ws, ".git")
	}
	if cfg.GitDir, err = filepath.Abs(cfg.GitDir); err != nil {
		return nil, fmt.Errorf("gitctl: git dir: %w", err)
	}
	if cfg.LockFile == "" {
		cfg.LockFile = filepath.Join(cfg.GitDir, rules.BastionGitLockFile)
	}
	if cfg.SessionID == "" {
		return nil, errNoSession
	}
	if _, err := gitpush.TargetRef(cfg.SessionID); err != nil {
		return nil, fmt.Errorf("gitctl: %w", err)
	}
	u, err := url.Parse(cfg.Remote.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("gitctl: Remote.URL must be an http(s) URL without credentials, query or fragment")
	}
	if cfg.Remote.Username == "" {
		cfg.Remote.Username = gitpush.DefaultUsername
	}
	git, err := gitexec.New(gitexec.Options{Git: cfg.Git, Timeout: cfg.Timeout, MaxProcs: 2})
	if err != nil {
		return nil, fmt.Errorf("gitctl: %w", err)
	}
	if cfg.DenyGlobs == nil {
		cfg.DenyGlobs = gitpush.DefaultDenyGlobs
	}
	g := &Gate{cfg: cfg, git: git, log: cfg.Logger, lock: lockedfile.MutexAt(cfg.LockFile)}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.log = g.log.With("component", "gitctl")
	if cfg.Remote.Token != "" {
		g.header = "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.Remote.Username+":"+cfg.Remote.Token))
	}
	return g, nil
}

// Result is what git answered.
type Result struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr,omitempty"`
	// Truncated says stdout was cut at rules.BastionGitMaxOutput.
	Truncated bool `json:"truncated,omitempty"`
}

// Run validates args (a *DeniedError when refused) and runs the command.
// A git that ran and exited non-zero is a Result with its exit code, not an
// error.
func (g *Gate) Run(ctx context.Context, args []string) (Result, error) {
	cmd, err := Parse(args, g.cfg.SessionID)
	if err != nil {
		g.log.Info("denied", "verb", verbOf(args), "err", err)
		return Result{}, err
	}
	unlock, err := g.lock.Lock()
	if err != nil {
		return Result{}, fmt.Errorf("gitctl: lock %s: %w", g.cfg.LockFile, err)
	}
	defer unlock()
	if err := g.checkRepo(ctx); err != nil {
		g.log.Warn("repository refused", "err", err)
		return Result{}, err
	}
	if cmd.Verb == "push" {
		// The remote's branches first, so that "new" below means what the
		// remote lacks; then the model B policy on every path they add.
		if res, err := g.exec(ctx, Command{Verb: "fetch", Args: []string{"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no"}}); err != nil || res.ExitCode != 0 {
			return res, err
		}
		if err := g.checkPush(ctx); err != nil {
			g.log.Info("push refused", "err", err)
			return Result{}, err
		}
	}
	return g.exec(ctx, cmd)
}

// exec runs an accepted command, adding the remote and its credential to
// push and fetch.
func (g *Gate) exec(ctx context.Context, cmd Command) (Result, error) {
	global, env := g.base()
	full := append(global, cmd.Args...)
	var redact []string
	if cmd.Remote() {
		full = append([]string{"-c", "credential.helper=", "-c", "http.followRedirects=false", "-c", "protocol.allow=never",
			"-c", "protocol.http.allow=always", "-c", "protocol.https.allow=always"}, full...)
		if cmd.Verb == "push" {
			full = append(full, g.cfg.Remote.URL, "HEAD:"+rules.SessionBranchPrefix+g.cfg.SessionID)
		} else {
			full = append(full, g.cfg.Remote.URL, "+refs/heads/*:refs/remotes/origin/*")
		}
		if g.header != "" {
			env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http."+g.cfg.Remote.URL+".extraHeader", "GIT_CONFIG_VALUE_0="+g.header)
			redact = []string{g.cfg.Remote.Token, g.header}
		}
	}
	out, cut, err := g.git.Output(ctx, gitexec.Cmd{Dir: g.cfg.Workspace, Args: full, Env: env, Redact: redact}, rules.BastionGitMaxOutput)
	var ge *gitexec.Error
	if errors.As(err, &ge) && gitexec.Exited(err) {
		g.log.Info("git", "verb", cmd.Verb, "exit_code", ge.ExitCode())
		return Result{ExitCode: ge.ExitCode(), Stderr: ge.Stderr}, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("gitctl: run git %s: %w", cmd.Verb, err)
	}
	g.log.Info("git", "verb", cmd.Verb, "exit_code", 0)
	return Result{Stdout: string(out), Truncated: cut}, nil
}

// checkPush refuses a push whose new commits (those no branch of the remote
// has) add or change a path that matches a deny glob, in any commit: a
// secret added then deleted is still in history.
func (g *Gate) checkPush(ctx context.Context) error {
	res, err := g.exec(ctx, Command{Verb: "log", Args: []string{"log", "--no-ext-diff", "--no-textconv", "--no-renames",
		"--format=", "--name-only", "-z", "HEAD", "--not", "--remotes=origin"}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.Truncated {
		return &DeniedError{Reason: "push refused: the new commits could not be listed: " + res.Stderr}
	}
	policy := gitpush.Policy{DenyGlobs: g.cfg.DenyGlobs}
	var bad []string
	for _, p := range strings.Split(res.Stdout, "\x00") {
		p = strings.TrimPrefix(p, "\n") // between commits, with some versions
		if p == "" {
			continue
		}
		if glob := policy.Denied(p); glob != "" {
			bad = append(bad, fmt.Sprintf("%s (deny glob %q)", p, glob))
		}
	}
	if len(bad) > 0 {
		return &DeniedError{Reason: "push refused: the new commits carry " + strings.Join(bad, ", ") + "; remove them from the branch's history"}
	}
	return nil
}

// base is the gate's global options and environment for every command.
func (g *Gate) base() ([]string, []string) {
	global := []string{"-c", "core.pager=cat", "-c", "core.editor=false", "-c", "core.sshCommand=false",
		"-c", "diff.external=", "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false", "-c", "core.askPass=true",
		"-c", "submodule.recurse=false", "-c", "gc.auto=0", "-c", "maintenance.auto=false"}
	if g.cfg.UserName != "" {
		global = append(global, "-c", "user.name="+g.cfg.UserName)
	}
	if g.cfg.UserEmail != "" {
		global = append(global, "-c", "user.email="+g.cfg.UserEmail)
	}
	env := []string{
		"GIT_DIR=" + g.cfg.GitDir, "GIT_WORK_TREE=" + g.cfg.Workspace,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "GIT_ATTR_NOSYSTEM=1",
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(g.cfg.Workspace),
	}
	return global, env
}

// safeKeys are the repository configuration keys the gate runs git with;
// a "*" stands for one subsection name.
var safeKeys = []string{
	"core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates", "core.ignorecase",
	"core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol", "core.safecrlf",
	"remote.*.url", "remote.*.fetch", "branch.*.remote", "branch.*.merge", "branch.*.rebase",
	"user.name", "user.email", "init.defaultbranch", "pull.rebase", "gc.auto",
}

// checkRepo refuses a git directory that is not a plain directory or that
// points git elsewhere, and a repository configuration with a key outside
// safeKeys.
func (g *Gate) checkRepo(ctx context.Context) error {
	fi, err := os.Lstat(g.cfg.GitDir)
	if err != nil || !fi.IsDir() {
		return &DeniedError{Reason: fmt.Sprintf("the git directory %s is missing or not a plain directory", g.cfg.GitDir)}
	}
	entries, err := os.ReadDir(g.cfg.GitDir)
	if err != nil {
		return fmt.Errorf("gitctl: read the git directory: %w", err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 {
			return &DeniedError{Reason: fmt.Sprintf("the git directory's %s is a symbolic link, which could lead git out of the repository; replace it with the real thing", e.Name())}
		}
	}
	for _, redirect := range []string{"commondir", "objects/info/alternates", "config.worktree"} {
		if _, err := os.Lstat(filepath.Join(g.cfg.GitDir, redirect)); err == nil {
			return &DeniedError{Reason: fmt.Sprintf("the git directory holds %s, which the gate does not follow; remove it", redirect)}
		}
	}
	_, env := g.base()
	out, cut, err := g.git.Output(ctx, gitexec.Cmd{Dir: g.cfg.Workspace, Env: env,
		Args: []string{"config", "--local", "--no-includes", "--name-only", "--list"}}, 1<<20)
	if err != nil || cut {
		return fmt.Errorf("gitctl: read the repository's configuration: %w", err)
	}
	for _, key := range strings.Fields(string(out)) {
		if !safeKey(key) {
			return &DeniedError{Reason: fmt.Sprintf("the repository's configuration sets %s, which the gate does not run git with; remove it from %s", key, filepath.Join(g.cfg.GitDir, "config"))}
		}
	}
	return nil
}

func safeKey(key string) bool {
	key = strings.ToLower(key)
	for _, k := range safeKeys {
		section, name, sub := strings.Cut(k, ".*.")
		if !sub {
			if key == k {
				return true
			}
			continue
		}
		rest, ok := strings.CutPrefix(key, section+".")
		if ok && strings.HasSuffix(rest, "."+name) && !strings.Contains(strings.TrimSuffix(rest, "."+name), ".") {
			return true
		}
	}
	return false
}

func verbOf(args []string) string {
	if len(args) == 0 || len(args[0]) > 32 {
		return ""
	}
	return args[0]
}

// Request is the body of POST /v1/git.
type Request struct {
	Args []string `json:"args"`
}

// Handler serves the protocol of the package doc.
func (g *Gate) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/git", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, rules.BastionGitMaxRequestBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"args\": [...]}: " + err.Error()})
			return
		}
		res, err := g.Run(r.Context(), req.Args)
		var de *DeniedError
		switch {
		case errors.As(err, &de):
			writeJSON(w, http.StatusForbidden, map[string]string{"error": de.Error()})
		case err != nil:
			g.log.Error("run git", "err", err)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "the gate could not run git; see the controller's log"})
		default:
			writeJSON(w, http.StatusOK, res)
		}
	})
	return mux
}

// Serve answers the protocol on ln until ctx ends.
func (g *Gate) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: rules.RequestHeaderTimeout}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			_ = srv.Close()
		case <-stop:
		}
	}()
	err := srv.Serve(ln)
	close(stop)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
