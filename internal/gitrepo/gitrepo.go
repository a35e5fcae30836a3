// Package gitrepo is the git view of the workspace: it finds the repositories
// under the workspace directory, validates repo ids and file paths against it,
// and runs the real git binary (through gitexec) for status, diff,
// changesets and bundles with a timeout and bounded output. Bundles it takes
// in go through gitbundle's quarantine, as on the host. internal/api
// serves it as /api/git/*; it knows nothing of HTTP.
package gitrepo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/gitbundle"
	"github.com/proliferate-ai/sandbox-mcp/gitexec"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// MaxDepth is how many levels below the workspace a repository may sit; the
// workspace itself is depth 0.
const MaxDepth = 3

// DefaultTimeout bounds every git invocation.
const DefaultTimeout = 10 * time.Second

// DefaultMaxDiffBytes is how much of a diff is returned before it is cut.
const DefaultMaxDiffBytes = 65536

// TruncatedMarker is appended to a diff that was cut at the cap.
const TruncatedMarker = "\n...[truncated]"

// maxStatusBytes bounds the output of git status that is read at all.
const maxStatusBytes = 32 << 20

// maxVisited bounds discovery on a workspace with an absurd fan-out.
const maxVisited = 50000

var (
	// ErrInvalidRepo means a repo id does not name a repository of the workspace.
	ErrInvalidRepo error = &fault.Error{Status: http.StatusBadRequest, Msg: "Invalid repo ID"}
	// ErrInvalidPath means a file path is not inside the repository.
	ErrInvalidPath error = &fault.Error{Status: http.StatusBadRequest, Msg: "Invalid file path"}
	// ErrPathTooLong means a file path is longer than MaxPathBytes; it is
	// also an ErrInvalidPath.
	ErrPathTooLong error = &fault.Error{Status: http.StatusBadRequest,
		Msg: fmt.Sprintf("Invalid file path: longer than %d bytes", MaxPathBytes), Kind: ErrInvalidPath}
)

// MaxPathBytes bounds the file path of a diff (Linux's PATH_MAX).
const MaxPathBytes = rules.MaxDiffPathBytes

// skipDirs are trees discovery never enters: dependency and cache folders that
// can hold tens of thousands of entries and no repository worth showing.
var skipDirs = map[string]bool{
	".git":             true,
	".hg":              true,
	".svn":             true,
	"node_modules":     true,
	"bower_components": true,
	"__pycache__":      true,
	".venv":            true,
	"venv":             true,
	".tox":             true,
	".mypy_cache":      true,
	".pytest_cache":    true,
	".next":            true,
	".nuxt":            true,
	".turbo":           true,
	".cache":           true,
	".npm":             true,
	".pnpm-store":      true,
	".yarn":            true,
	".gradle":          true,
	".m2":              true,
	".cargo":           true,
	".rustup":          true,
}

// Options configures a Workspace.
type Options struct {
	// Dir is the workspace directory; required, must exist.
	Dir    string
	Logger *slog.Logger
	// Git is the git binary; default: "git" looked up on PATH.
	Git string
	// Timeout bounds every git call; default DefaultTimeout.
	Timeout time.Duration
	// MaxDiffBytes caps a diff; default DefaultMaxDiffBytes.
	MaxDiffBytes int
	// MaxProcs bounds the git processes running at once; default 8. Callers
	// beyond it wait (within their context), so a burst of requests cannot
	// fill the sandbox with git processes.
	MaxProcs int
	// MaxBundleBytes bounds a bundle made or applied; default DefaultMaxBundleBytes.
	MaxBundleBytes int64
	// MaxBundleJobs bounds the bundles made or applied at once; default
	// rules.GitBundleJobs. Callers beyond it wait within their context.
	MaxBundleJobs int
	// BundleLimits bound the pack of a bundle applied, checked before git
	// inflates it; zero fields take rules.GitBundleMax*.
	BundleLimits gitbundle.Limits
}

// Workspace finds and inspects the git repositories of one workspace directory.
type Workspace struct {
	dir       string // absolute, clean, as configured (paths are reported under it)
	realDir   string // dir with symlinks resolved (ids are validated against it)
	git       *gitexec.Runner
	maxDiff   int
	maxBundle int64
	limits    gitbundle.Limits
	bundles   chan struct{}
	log       *slog.Logger
}

// New checks opts and returns a Workspace.
func New(opts Options) (*Workspace, error) {
	if opts.Logger == nil {
		return nil, errors.New("gitrepo: Logger is required")
	}
	if opts.Dir == "" {
		return nil, errors.New("gitrepo: Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolve workspace %q: %w", opts.Dir, err)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve workspace %q: %w", opts.Dir, err)
	}
	if fi, err := os.Stat(realDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("workspace %q is not a directory", opts.Dir)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxDiffBytes <= 0 {
		opts.MaxDiffBytes = DefaultMaxDiffBytes
	}
	if opts.MaxBundleBytes <= 0 {
		opts.MaxBundleBytes = DefaultMaxBundleBytes
	}
	if opts.MaxProcs <= 0 {
		opts.MaxProcs = 8
	}
	if opts.MaxBundleJobs <= 0 {
		opts.MaxBundleJobs = rules.GitBundleJobs
	}
	if opts.BundleLimits.MaxObjectBytes <= 0 {
		opts.BundleLimits.MaxObjectBytes = rules.GitBundleMaxObjectBytes
	}
	if opts.BundleLimits.MaxInflatedBytes <= 0 {
		opts.BundleLimits.MaxInflatedBytes = rules.GitBundleMaxInflatedBytes
	}
	if opts.BundleLimits.MaxObjects == 0 {
		opts.BundleLimits.MaxObjects = rules.GitBundleMaxObjects
	}
	git, err := gitexec.New(gitexec.Options{Git: opts.Git, Timeout: opts.Timeout, MaxProcs: opts.MaxProcs})
	if err != nil {
		return nil, err
	}
	return &Workspace{
		dir:       dir,
		realDir:   realDir,
		git:       git,
		maxDiff:   opts.MaxDiffBytes,
		maxBundle: opts.MaxBundleBytes,
		limits:    opts.BundleLimits,
		bundles:   make(chan struct{}, opts.MaxBundleJobs),
		log:       opts.Logger.With("component", "gitrepo"),
	}, nil
}

// Dir returns the workspace directory as configured (absolute).
func (w *Workspace) Dir() string { return w.dir }

// RepoID returns the id of the repository at the absolute path p.
func RepoID(p string) string { return base64.StdEncoding.EncodeToString([]byte(p)) }

// Repos lists every directory at most MaxDepth levels below the workspace
// (the workspace included) that holds a .git directory, or a .git file as in
// linked worktrees. Symbolic links are not followed, so a link leaving the
// workspace never adds a repository, and dependency trees such as node_modules
// are never entered. No process is spawned.
func (w *Workspace) Repos(ctx context.Context) ([]apitype.GitRepo, error) {
	repos := []apitype.GitRepo{}
	type item struct {
		path  string
		depth int
	}
	stack := []item{{w.dir, 0}}
	visited := 0
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if visited++; visited > maxVisited {
			w.log.Warn("repo discovery stopped early", "visited", visited-1)
			break
		}
		if visited%256 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("discover repos: %w", ctx.Err())
		}
		if it.depth == MaxDepth {
			// Deepest level: only ask whether it is a repository.
			if hasGit(it.path) {
				repos = append(repos, apitype.GitRepo{ID: RepoID(it.path), Path: it.path})
			}
			continue
		}
		entries, err := os.ReadDir(it.path)
		if err != nil {
			if it.depth == 0 {
				return nil, fmt.Errorf("read workspace: %w", err)
			}
			continue // unreadable folders hold no repository we can show
		}
		for _, e := range entries {
			name := e.Name()
			if name == ".git" {
				if t := e.Type(); t.IsDir() || t.IsRegular() {
					repos = append(repos, apitype.GitRepo{ID: RepoID(it.path), Path: it.path})
				}
				continue
			}
			if !e.IsDir() || skipDirs[name] { // symlinks are not IsDir
				continue
			}
			stack = append(stack, item{filepath.Join(it.path, name), it.depth + 1})
		}
	}
	sort.Slice(repos, func(i, j int) bool { return repos[i].Path < repos[j].Path })
	return repos, nil
}

// hasGit reports whether dir holds a .git directory or a .git file (worktree).
func hasGit(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, ".git"))
	return err == nil && (fi.IsDir() || fi.Mode().IsRegular())
}

// resolveRepo turns a repo id into the real path of a repository that Repos
// would list. Any failure is ErrInvalidRepo.
func (w *Workspace) resolveRepo(id string) (string, error) {
	// A '+' sent unescaped in a query string arrives as a space; base64 has none.
	id = strings.ReplaceAll(id, " ", "+")
	b, err := base64.StdEncoding.DecodeString(id)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(id); err != nil {
			return "", ErrInvalidRepo
		}
	}
	p := string(b)
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", ErrInvalidRepo
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", ErrInvalidRepo
	}
	rel, ok := within(w.realDir, real)
	if !ok {
		return "", ErrInvalidRepo
	}
	if rel != "." {
		parts := strings.Split(rel, string(filepath.Separator))
		if len(parts) > MaxDepth {
			return "", ErrInvalidRepo
		}
		for _, part := range parts {
			if skipDirs[part] {
				return "", ErrInvalidRepo
			}
		}
	}
	if !hasGit(real) {
		return "", ErrInvalidRepo
	}
	return real, nil
}

// within returns p relative to root when p is root or below it.
func within(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// resolvePath checks that the relative path p stays inside repo, symlinks
// resolved, and returns it cleaned. The file need not exist (a deleted file
// still has a diff): the deepest existing part of the path is what must
// resolve inside the repository. The work is linear in the length of p,
// which is at most MaxPathBytes.
func resolvePath(repo, p string) (string, error) {
	if len(p) > MaxPathBytes {
		return "", ErrPathTooLong
	}
	if p == "" || filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", ErrInvalidPath
	}
	clean := filepath.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", ErrInvalidPath
	}
	real, err := resolveExisting(repo, clean)
	if err != nil {
		return "", ErrInvalidPath
	}
	if _, ok := within(repo, real); !ok {
		return "", ErrInvalidPath
	}
	return clean, nil
}

// maxSymlinks is how many symbolic links resolveExisting follows, as Linux does.
const maxSymlinks = 40

// resolveExisting resolves rel below the real directory root one component
// at a time, following symbolic links, and stops at the first component that
// does not exist: it returns the real path of the deepest existing part.
// Each component costs one fstatat on an open directory descriptor, so the
// work is linear in the length of rel plus the targets of the (at most
// maxSymlinks) links it follows, where resolving every ancestor with
// filepath.EvalSymlinks was quadratic (60,000 components took 20 s).
func resolveExisting(root, rel string) (string, error) {
	const dirFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	dirfd, err := unix.Open(root, dirFlags, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", root, err)
	}
	defer func() { unix.Close(dirfd) }()
	enter := func(name string, flags int) error {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != nil {
			return err
		}
		unix.Close(dirfd)
		dirfd = fd
		return nil
	}
	dest, rest, links := root, rel, 0
	for rest != "" {
		var comp string
		comp, rest, _ = strings.Cut(rest, "/")
		switch comp {
		case "", ".":
			continue
		case "..":
			// Only link targets bring ".." here (rel is clean); dest is a
			// real path, so its parent is the lexical one.
			if dest != "/" {
				if err := enter("..", dirFlags); err != nil {
					return "", err
				}
				dest = filepath.Dir(dest)
			}
			continue
		}
		var st unix.Stat_t
		err := unix.Fstatat(dirfd, comp, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			return dest, nil
		}
		if err != nil {
			return "", err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if links++; links > maxSymlinks {
				return "", unix.ELOOP
			}
			target, err := readlinkat(dirfd, comp)
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(target, "/") {
				fd, err := unix.Open("/", dirFlags, 0)
				if err != nil {
					return "", err
				}
				unix.Close(dirfd)
				dirfd, dest = fd, "/"
			}
			if rest != "" {
				target += "/" + rest
			}
			rest = target
		case unix.S_IFDIR:
			if err := enter(comp, dirFlags|unix.O_NOFOLLOW); err != nil {
				return "", err
			}
			dest = filepath.Join(dest, comp)
		default:
			// A file ends the path: nothing can exist below it.
			return filepath.Join(dest, comp), nil
		}
	}
	return dest, nil
}

// readlinkat reads the target of the symbolic link name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}
