package gitbundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/gitexec"
)

// quarantinePrefix names the temporary object directories of intakes.
const quarantinePrefix = "sandbox-mcp-quarantine-"

// staleQuarantine is the age past which a quarantine left by a crash is removed.
const staleQuarantine = time.Hour

// strictChecks raise the fsck messages about dangerous tree entries from
// warnings to errors, on top of index-pack --strict's own errors (a
// .gitmodules URL or path that starts with "-", a broken object, …).
const strictChecks = "--strict=hasDotgit=error,hasDotdot=error,hasDot=error,fullPathname=error,emptyName=error"

// Rejection says a bundle was refused for what it holds, not for a failure of
// the machinery; the caller answers it as the sender's mistake.
type Rejection struct {
	// Rule is "header", "pack" (a Limits or syntax failure) or "fsck".
	Rule   string
	Detail string
}

func (e *Rejection) Error() string { return "bundle refused (" + e.Rule + "): " + e.Detail }

// Intake is a bundle's objects held in a quarantine object directory of a
// repository: git commands given Env see them along with the repository's
// own, nothing else does, and they join the repository only on Accept.
type Intake struct {
	// Header is the bundle's header.
	Header Header
	// Pack is what ScanPack saw.
	Pack PackStats

	git     *gitexec.Runner
	repo    string
	objects string // the repository's object directory
	dir     string // the quarantine
}

// Receive takes the bundle file in, for the repository at repo (a work tree
// or a bare repository), into a fresh quarantine: the header is parsed, the
// pack scanned against lim (no inflating past the declared sizes), and
// index-pack --strict (fsck of every object, .gitmodules included, and of
// every link; thin bases taken from the repository) writes it. A bundle
// refused for its content is a *Rejection; the quarantine is gone then.
// Otherwise the caller must Accept or Drop the Intake.
func Receive(ctx context.Context, git *gitexec.Runner, repo, bundle string, lim Limits) (*Intake, error) {
	f, err := os.Open(bundle)
	if err != nil {
		return nil, fmt.Errorf("open bundle: %w", err)
	}
	defer f.Close()
	h, err := Parse(f)
	if err != nil {
		return nil, &Rejection{Rule: "header", Detail: err.Error()}
	}
	hashLen := 20
	if h.ObjectFormat() == "sha256" {
		hashLen = 32
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	packLen := fi.Size() - int64(h.Len)
	st, err := ScanPack(io.NewSectionReader(f, int64(h.Len), packLen), hashLen, lim)
	if err != nil {
		return nil, &Rejection{Rule: "pack", Detail: err.Error()}
	}
	objects, err := objectDir(ctx, git, repo)
	if err != nil {
		return nil, err
	}
	sweepStale(objects)
	dir, err := os.MkdirTemp(objects, quarantinePrefix)
	if err != nil {
		return nil, fmt.Errorf("quarantine: %w", err)
	}
	q := &Intake{Header: h, Pack: st, git: git, repo: repo, objects: objects, dir: dir}
	if err := os.Mkdir(filepath.Join(dir, "pack"), 0o755); err != nil {
		q.Drop()
		return nil, fmt.Errorf("quarantine: %w", err)
	}
	err = git.Run(ctx, gitexec.Cmd{Dir: repo, Env: q.Env(), Stdin: io.NewSectionReader(f, int64(h.Len), packLen),
		Args: []string{"index-pack", "--stdin", "--fix-thin", strictChecks, fmt.Sprintf("--max-input-size=%d", packLen)}})
	if err != nil {
		q.Drop()
		var ge *gitexec.Error
		if errors.As(err, &ge) && gitexec.Exited(err) {
			return nil, &Rejection{Rule: "fsck", Detail: ge.Stderr}
		}
		return nil, err
	}
	return q, nil
}

// objectDir is the absolute object directory of the repository at repo.
func objectDir(ctx context.Context, git *gitexec.Runner, repo string) (string, error) {
	out, _, err := git.Output(ctx, gitexec.Cmd{Dir: repo, Args: []string{"rev-parse", "--git-path", "objects"}}, 4096)
	if err != nil {
		return "", err
	}
	p := strings.TrimSpace(string(out))
	if !filepath.IsAbs(p) {
		p = filepath.Join(repo, p)
	}
	return p, nil
}

// sweepStale removes quarantines that a crash left behind.
func sweepStale(objects string) {
	old, _ := filepath.Glob(filepath.Join(objects, quarantinePrefix+"*"))
	for _, d := range old {
		if fi, err := os.Lstat(d); err == nil && time.Since(fi.ModTime()) > staleQuarantine {
			_ = os.RemoveAll(d)
		}
	}
}

// Env makes a git command see the quarantined objects as well as the
// repository's; objects it writes go to the quarantine.
func (q *Intake) Env() []string {
	return []string{"GIT_OBJECT_DIRECTORY=" + q.dir, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + q.objects,
		"GIT_QUARANTINE_PATH=" + q.dir}
}

// Paths lists, sorted and once each, every path that a commit reachable from
// tips and from no ref of the repository adds or modifies (history included:
// a file added and then deleted is listed).
func (q *Intake) Paths(ctx context.Context, tips []string, limit int) ([]string, error) {
	args := append([]string{"log", "-z", "--format=", "--name-only", "--no-renames", "--diff-filter=d", "-m"}, tips...)
	out, cut, err := q.git.Output(ctx, gitexec.Cmd{Dir: q.repo, Env: q.Env(), Args: append(args, "--not", "--all")}, limit)
	if err != nil {
		return nil, err
	}
	if cut {
		return nil, fmt.Errorf("the bundle's paths exceed %d bytes", limit)
	}
	seen := map[string]bool{}
	var paths []string
	for _, p := range bytes.Split(out, []byte{0}) {
		p := strings.TrimLeft(string(p), "\n")
		if p != "" && !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	return paths, nil
}

// Accept moves the quarantined packs into the repository's object directory
// (each pack before its index, so no reader sees an index without its pack)
// and removes the quarantine.
func (q *Intake) Accept() error {
	defer q.Drop()
	files, err := os.ReadDir(filepath.Join(q.dir, "pack"))
	if err != nil {
		return fmt.Errorf("accept bundle: %w", err)
	}
	rank := func(name string) int {
		switch filepath.Ext(name) {
		case ".pack":
			return 0
		case ".idx":
			return 2
		}
		return 1
	}
	sort.SliceStable(files, func(i, j int) bool { return rank(files[i].Name()) < rank(files[j].Name()) })
	for _, e := range files {
		name := e.Name()
		if !strings.HasPrefix(name, "pack-") {
			continue // index-pack's temporary files
		}
		dst := filepath.Join(q.objects, "pack", name)
		if _, err := os.Lstat(dst); err == nil {
			continue // the same pack is already there
		}
		if err := os.Rename(filepath.Join(q.dir, "pack", name), dst); err != nil {
			return fmt.Errorf("accept bundle: %w", err)
		}
	}
	return nil
}

// Drop removes the quarantine and everything in it; safe to call twice.
func (q *Intake) Drop() { _ = os.RemoveAll(q.dir) }
