package gitpush

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/gitbundle"
)

// Result is what a push did.
type Result struct {
	// Ref is refs/heads/session/<sessionId>.
	Ref string `json:"ref"`
	// SHA is the commit the ref now points at.
	SHA string `json:"sha"`
	// Old is the ref's commit before, "" when the push created it.
	Old string `json:"old,omitempty"`
	// Commits is how many commits the remote did not have.
	Commits int `json:"commits"`
	// UpToDate says the ref already pointed at SHA: nothing was sent.
	UpToDate bool `json:"upToDate,omitempty"`
}

// Push pushes the commit of a sandbox's bundle to refs/heads/session/<sessionId>
// of the remote, whatever ref names the bundle claims. The bundle must carry
// exactly one branch, its prerequisites must be in the (freshly fetched)
// mirror, its pack must pass the size limits and fsck, the push must be a
// fast-forward, and the new commits must pass the path rules and the policy;
// otherwise a *RefusedError lists every reason and nothing is pushed. The
// bundle's objects wait in a quarantine beside the mirror and join it only
// once accepted: a refused push leaves the mirror as it was.
func (m *Mirrors) Push(ctx context.Context, r Remote, sessionID string, bundle io.Reader) (Result, error) {
	target, err := TargetRef(sessionID)
	if err != nil {
		return Result{}, err
	}
	res := Result{Ref: target}
	if err := checkURL(r.URL); err != nil {
		return res, err
	}
	file, err := m.spool(bundle)
	var re *RefusedError
	if errors.As(err, &re) {
		re.Target = target
	}
	if err != nil {
		return res, err
	}
	defer os.Remove(file)
	refused := &RefusedError{Target: target}
	refuse := func(rule, path, format string, args ...any) {
		refused.Refusals = append(refused.Refusals, Refusal{Rule: rule, Path: path, Detail: fmt.Sprintf(format, args...)})
	}
	h, err := oneBranch(file)
	if err != nil {
		refuse(RuleBundle, "", "%v", err)
		return res, refused
	}

	dir := m.mirrorDir(r.URL)
	defer m.lock(dir)()
	if err := m.update(ctx, dir, r); err != nil {
		return res, err
	}
	for _, p := range h.Prerequisites {
		if _, err := m.run(ctx, dir, nil, nil, "cat-file", "-e", p.OID+"^{commit}"); err != nil {
			refuse(RulePrerequisite, "", "the bundle builds on %s, which the remote does not have", p.OID)
		}
	}
	if len(refused.Refusals) > 0 {
		return res, refused
	}
	q, err := gitbundle.Receive(ctx, m.git, dir, file, m.limits)
	var rej *gitbundle.Rejection
	if errors.As(err, &rej) {
		refuse(RuleBundle, "", "%v", rej)
		return res, refused
	}
	if err != nil {
		return res, err
	}
	defer q.Drop()
	newSHA, err := m.rev(ctx, dir, q.Env(), h.Refs[0].OID+"^{commit}")
	if err != nil || newSHA == "" {
		refuse(RuleBundle, "", "the bundle's ref %s is not a commit", h.Refs[0].Name)
		return res, refused
	}
	old, _ := m.rev(ctx, dir, nil, target)
	res.SHA, res.Old = newSHA, old
	if old == newSHA {
		res.UpToDate = true
		return res, nil
	}
	if old != "" {
		if _, err := m.run(ctx, dir, q.Env(), nil, "merge-base", "--is-ancestor", old, newSHA); err != nil {
			refuse(RuleFastForward, "", "%s is at %s, which %s does not descend from (a force push)", target, short(old), short(newSHA))
			return res, refused
		}
	}
	if err := m.review(ctx, dir, q, newSHA, refuse, &res); err != nil {
		return res, err
	}
	if len(refused.Refusals) > 0 {
		return res, refused
	}
	if err := q.Accept(); err != nil {
		return res, err
	}
	if _, err := m.remote(ctx, dir, r, "-c", "push.followTags=false", "push", "--quiet", "--no-verify",
		"--force-with-lease="+target+":"+old, "origin", newSHA+":"+target); err != nil {
		return res, fmt.Errorf("push %s: %w", target, err)
	}
	if _, err := m.run(ctx, dir, nil, nil, "update-ref", target, newSHA); err != nil {
		return res, fmt.Errorf("record push in mirror: %w", err)
	}
	return res, nil
}

// oneBranch reads the header of the bundle file: it must carry exactly one
// ref, a branch (its name is ignored; only its commit is pushed).
func oneBranch(file string) (gitbundle.Header, error) {
	f, err := os.Open(file)
	if err != nil {
		return gitbundle.Header{}, err
	}
	defer f.Close()
	h, err := gitbundle.Parse(f)
	if err != nil {
		return h, err
	}
	if len(h.Refs) != 1 {
		var names []string
		for _, ref := range h.Refs {
			names = append(names, ref.Name)
		}
		return h, fmt.Errorf("the bundle carries %d refs (%s); exactly one branch is pushed", len(h.Refs), strings.Join(names, ", "))
	}
	if src := h.Refs[0].Name; src != "HEAD" && !strings.HasPrefix(src, "refs/heads/") {
		return h, fmt.Errorf("the bundle's ref %s is not a branch", src)
	}
	return h, nil
}

// review applies the path rules and the policy to every commit and blob
// newSHA brings that the remote lacks: paths against gitbundle.CheckPath and
// the deny globs, blob sizes against the caps.
func (m *Mirrors) review(ctx context.Context, dir string, q *gitbundle.Intake, newSHA string, refuse func(rule, path, format string, args ...any), res *Result) error {
	env := q.Env()
	not := []string{"--not", "--all"}
	out, err := m.run(ctx, dir, env, nil, append([]string{"rev-list", "--count", newSHA}, not...)...)
	if err != nil {
		return err
	}
	res.Commits, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	// Every path a new commit adds or changes, in any commit (a secret added
	// then deleted is still in history).
	paths, err := q.Paths(ctx, []string{newSHA}, maxOutput)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if err := gitbundle.CheckPath(p); err != nil {
			refuse(RulePath, p, "%v", err)
		} else if g := m.policy.Denied(p); g != "" {
			refuse(RuleDenyGlob, p, "matches deny glob %q", g)
		}
	}
	// Every new object with its path; the blobs' sizes from cat-file.
	out, err = m.run(ctx, dir, env, nil, append([]string{"rev-list", "--objects", "--no-object-names", newSHA}, not...)...)
	if err != nil {
		return err
	}
	withNames, err := m.run(ctx, dir, env, nil, append([]string{"rev-list", "--objects", newSHA}, not...)...)
	if err != nil {
		return err
	}
	names := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(withNames))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if oid, name, ok := strings.Cut(sc.Text(), " "); ok {
			names[oid] = name
		}
	}
	sizes, err := m.run(ctx, dir, env, bytes.NewReader(out), "cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)")
	if err != nil {
		return err
	}
	var total int64
	sc = bufio.NewScanner(bytes.NewReader(sizes))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[1] != "blob" {
			continue
		}
		n, _ := strconv.ParseInt(f[2], 10, 64)
		total += n
		if n > m.policy.MaxFileBytes {
			refuse(RuleFileSize, names[f[0]], "%d bytes, over the %d-byte cap", n, m.policy.MaxFileBytes)
		}
	}
	if total > m.policy.MaxTotalBytes {
		refuse(RuleTotalSize, "", "the new files total %d bytes, over the %d-byte cap", total, m.policy.MaxTotalBytes)
	}
	return nil
}

// spool copies a bundle into a file of the cache dir, at most the bundle cap.
func (m *Mirrors) spool(r io.Reader) (string, error) {
	f, err := os.CreateTemp(m.dir, "incoming-*.bundle")
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.LimitReader(r, m.maxBundle+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > m.maxBundle {
		err = &RefusedError{Target: "", Refusals: []Refusal{{Rule: RuleBundle, Detail: fmt.Sprintf("the bundle exceeds %d bytes", m.maxBundle)}}}
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// rev resolves rev in dir (env added to git's); "" without error when it
// does not exist.
func (m *Mirrors) rev(ctx context.Context, dir string, env []string, rev string) (string, error) {
	out, err := m.run(ctx, dir, env, nil, "rev-parse", "--verify", "--quiet", rev)
	if err != nil {
		return "", nil
	}
	return strings.TrimSpace(string(out)), nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
