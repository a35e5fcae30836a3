package gitctl

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// DeniedError is a request the gate refuses: a command outside the
// allowlist, an option it does not pass, a path outside the workspace.
type DeniedError struct {
	// Reason is safe to show the agent.
	Reason string
}

func (e *DeniedError) Error() string { return "gitctl: denied: " + e.Reason }

func deny(format string, args ...any) error {
	return &DeniedError{Reason: fmt.Sprintf(format, args...)}
}

// Command is a request the gate accepted: the arguments it hands git (after
// the gate's own global options), and whether the command talks to the
// remote (push, fetch), in which case the gate adds the remote's URL,
// refspec and credential itself.
type Command struct {
	// Verb is status, diff, add, commit, push, fetch or log.
	Verb string
	// Args are git's arguments, Verb first, validated and in canonical
	// order: the verb, the gate's forced options, the caller's options,
	// revisions, then "--" and paths.
	Args []string
}

// Remote reports whether c talks to the remote.
func (c Command) Remote() bool { return c.Verb == "push" || c.Verb == "fetch" }

// spec is what one verb accepts.
type spec struct {
	flags    []string         // options taken as they are
	patterns []*regexp.Regexp // options with an inline value (-U3, --max-count=5)
	revs     bool             // positional arguments before "--" are revisions
	paths    bool             // paths are accepted (after "--", or positional when !revs)
	forced   []string         // options the gate always adds
}

var (
	digits    = regexp.MustCompile(`^(-U|--unified=|-n|-|--max-count=|--skip=)[0-9]{1,6}$`)
	logValues = regexp.MustCompile(`^--(format|pretty|since|until|after|before|author|committer|grep)=[^\x00]*$`)
	untracked = regexp.MustCompile(`^(-u|--untracked-files=)(no|normal|all)$`)
	revision  = regexp.MustCompile(`^[A-Za-z0-9_@][A-Za-z0-9._/~^@{}:+-]{0,255}$`)
)

// specs is the allowlist: the seed's verbs and, for each, only options that
// neither run a program nor read or write outside the repository
// (no --output, --ext-diff, --textconv, --exec, --upload-pack, -F, …).
var specs = map[string]spec{
	"status": {
		flags:    []string{"-s", "--short", "-b", "--branch", "--porcelain", "--porcelain=v1", "--porcelain=v2", "--long", "-z"},
		patterns: []*regexp.Regexp{untracked},
		paths:    true,
	},
	"diff": {
		flags: []string{"--cached", "--staged", "--stat", "--numstat", "--shortstat", "--name-only", "--name-status",
			"-p", "--patch", "-z", "--raw", "--summary", "-R", "--check", "--word-diff", "--no-renames", "-M", "--find-renames"},
		patterns: []*regexp.Regexp{digits},
		revs:     true, paths: true,
		forced: []string{"--no-ext-diff", "--no-textconv"},
	},
	"add": {
		flags: []string{"-A", "--all", "-u", "--update", "-N", "--intent-to-add", "-n", "--dry-run", "-v", "--verbose"},
		paths: true,
	},
	"commit": {
		flags:  []string{"-a", "--all", "--allow-empty", "-q", "--quiet", "-s", "--signoff"},
		paths:  true,
		forced: []string{"--no-verify", "--no-gpg-sign", "--no-edit", "--cleanup=strip"},
	},
	"log": {
		flags: []string{"--oneline", "--stat", "--numstat", "--shortstat", "--name-only", "--name-status", "-p", "--patch",
			"--graph", "--decorate", "--no-decorate", "--all", "--reverse", "--first-parent", "--no-merges", "--merges", "-z"},
		patterns: []*regexp.Regexp{digits, logValues},
		revs:     true, paths: true,
		forced: []string{"--no-ext-diff", "--no-textconv"},
	},
	"fetch": {flags: []string{"-q", "--quiet", "--prune", "-p"}},
	"push":  {},
}

// Allowed is the list of verbs the gate runs, for messages.
const Allowed = "status, diff, add, commit, push HEAD:refs/heads/session/<id>, fetch, log"

// maxArgBytes bounds one argument; a commit message may be longer.
const (
	maxArgBytes     = 4096
	maxMessageBytes = 64 << 10
)

// Parse validates the arguments of one git command for the session
// sessionID (already checked to name a branch) and returns the command the
// gate runs. Every refusal is a *DeniedError.
func Parse(args []string, sessionID string) (Command, error) {
	if len(args) == 0 {
		return Command{}, deny("no git command given; the gate runs %s", Allowed)
	}
	if len(args) > rules.BastionGitMaxArgs {
		return Command{}, deny("%d arguments, over the %d the gate takes", len(args), rules.BastionGitMaxArgs)
	}
	for _, a := range args {
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return Command{}, deny("an argument holds a NUL byte or invalid UTF-8")
		}
		if len(a) > maxMessageBytes {
			return Command{}, deny("an argument is %d bytes, over %d", len(a), maxMessageBytes)
		}
	}
	verb := args[0]
	if strings.HasPrefix(verb, "-") {
		return Command{}, deny("global option %q is not allowed (no -c, -C, --git-dir, --work-tree, --exec-path); the gate runs %s", verb, Allowed)
	}
	sp, ok := specs[verb]
	if !ok {
		return Command{}, deny("git %s is not allowed; the gate runs %s", verb, Allowed)
	}
	rest := args[1:]
	switch verb {
	case "push":
		return parsePush(rest, sessionID)
	case "fetch":
		return parseFetch(rest, sp)
	}
	var flags, revs, paths, messages []string
	dashdash := false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case dashdash:
			if !sp.paths {
				return Command{}, deny("git %s takes no paths", verb)
			}
			if err := checkPath(a); err != nil {
				return Command{}, err
			}
			paths = append(paths, a)
		case a == "--":
			dashdash = true
		case verb == "commit" && (a == "-m" || a == "--message"):
			if i+1 >= len(rest) {
				return Command{}, deny("%s needs a message", a)
			}
			i++
			messages = append(messages, "-m", rest[i])
		case verb == "commit" && strings.HasPrefix(a, "--message="):
			messages = append(messages, "-m", strings.TrimPrefix(a, "--message="))
		case verb == "log" && a == "-n":
			if i+1 >= len(rest) || !digits.MatchString("-n"+rest[i+1]) {
				return Command{}, deny("-n needs a count")
			}
			i++
			flags = append(flags, "-n"+rest[i])
		case strings.HasPrefix(a, "-") && a != "-":
			if len(a) > maxArgBytes {
				return Command{}, deny("option of %d bytes is too long", len(a))
			}
			if !flagAllowed(sp, a) {
				return Command{}, deny("git %s: option %q is not allowed", verb, a)
			}
			flags = append(flags, a)
		case sp.revs:
			if !revision.MatchString(a) {
				return Command{}, deny("git %s: %q is not a revision (put paths after \"--\")", verb, a)
			}
			revs = append(revs, a)
		case sp.paths:
			if err := checkPath(a); err != nil {
				return Command{}, err
			}
			paths = append(paths, a)
		default:
			return Command{}, deny("git %s takes no argument %q", verb, a)
		}
	}
	if verb == "commit" && len(messages) == 0 {
		return Command{}, deny("git commit needs -m <message>: the gate opens no editor")
	}
	out := append([]string{verb}, sp.forced...)
	out = append(out, flags...)
	out = append(out, messages...)
	out = append(out, revs...)
	if len(paths) > 0 {
		out = append(append(out, "--"), paths...)
	}
	return Command{Verb: verb, Args: out}, nil
}

func flagAllowed(sp spec, a string) bool {
	for _, f := range sp.flags {
		if a == f {
			return true
		}
	}
	for _, p := range sp.patterns {
		if p.MatchString(a) {
			return true
		}
	}
	return false
}

// checkPath accepts a path that stays inside the workspace: relative,
// without "..", not inside the git directory.
func checkPath(p string) error {
	if len(p) > maxArgBytes {
		return deny("path of %d bytes is too long", len(p))
	}
	if p != "." && !filepath.IsLocal(p) {
		return deny("path %q leaves the workspace: give a relative path without \"..\"", p)
	}
	first, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(p)), "/")
	if strings.EqualFold(first, ".git") {
		return deny("path %q is inside the git directory", p)
	}
	return nil
}

// parsePush accepts only "push [origin] HEAD:refs/heads/session/<id>".
func parsePush(rest []string, sessionID string) (Command, error) {
	want := "HEAD:" + rules.SessionBranchPrefix + sessionID
	if len(rest) == 2 && rest[0] == "origin" {
		rest = rest[1:]
	}
	if len(rest) != 1 || rest[0] != want {
		return Command{}, deny("push takes only %q (no force, no other branch, no other remote)", want)
	}
	return Command{Verb: "push", Args: []string{"push", "--no-verify", "--porcelain", "--recurse-submodules=no"}}, nil
}

// parseFetch accepts "fetch [origin]" with quiet and prune.
func parseFetch(rest []string, sp spec) (Command, error) {
	args := []string{"fetch", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no"}
	for i, a := range rest {
		switch {
		case a == "origin" && i == len(rest)-1:
		case flagAllowed(sp, a):
			args = append(args, a)
		default:
			return Command{}, deny("fetch takes only [--quiet] [--prune] [origin], not %q", a)
		}
	}
	return Command{Verb: "fetch", Args: args}, nil
}

// errNoSession is New's error for a missing session.
var errNoSession = errors.New("gitctl: SessionID is required: pushes go to refs/heads/session/<id>")
