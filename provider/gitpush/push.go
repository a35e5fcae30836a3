package gitpush

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/gitbundle"
)

// incomingPrefix holds the refs a bundle is fetched into before review; they
// never reach the remote and are removed after each push.
const incomingPrefix = "refs/gitpush/"

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
// mirror, the push must be a fast-forward, and the new commits must pass the
// policy; otherwise a *RefusedError lists every reason and nothing is pushed.
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
	f, err := os.Open(file)
	if err != nil {
		return res, err
	}
	h, err := gitbundle.Parse(f)
	f.Close()
	if err != nil {
		refuse(RuleBundle, "", "%v", err)
		return res, refused
	}
	if len(h.Refs) != 1 {
		var names []string
		for _, ref := range h.Refs {
			names = append(names, ref.Name)
		}
		refuse(RuleBundle, "", "the bundle carries %d refs (%s); exactly one branch is pushed", len(h.Refs), strings.Join(names, ", "))
		return res, refused
	}
	src := h.Refs[0].Name
	if src != "HEAD" && !strings.HasPrefix(src, "refs/heads/") {
		refuse(RuleBundle, "", "the bundle's ref %s is not a branch", src)
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

	incoming := incomingPrefix + randomHex()
	defer func() {
		_, _ = m.run(context.WithoutCancel(ctx), dir, nil, nil, "update-ref", "-d", incoming)
	}()
	if _, err := m.run(ctx, dir, nil, nil, "-c", "transfer.fsckObjects=true", "fetch", "--quiet", "--no-tags",
		"--no-write-fetch-head", file, "+"+src+":"+incoming); err != nil {
		refuse(RuleBundle, "", "git rejected the bundle: %v", err)
		return res, refused
	}
	newSHA, err := m.rev(ctx, dir, incoming+"^{commit}")
	if err != nil || newSHA == "" {
		refuse(RuleBundle, "", "the bundle's ref %s is not a commit", src)
		return res, refused
	}
	old, _ := m.rev(ctx, dir, target)
	res.SHA, res.Old = newSHA, old
	if old == newSHA {
		res.UpToDate = true
		return res, nil
	}
	if old != "" {
		if _, err := m.run(ctx, dir, nil, nil, "merge-base", "--is-ancestor", old, newSHA); err != nil {
			refuse(RuleFastForward, "", "%s is at %s, which %s does not descend from (a force push)", target, short(old), short(newSHA))
			return res, refused
		}
	}
	if err := m.review(ctx, dir, newSHA, refuse, &res); err != nil {
		return res, err
	}
	if len(refused.Refusals) > 0 {
		return res, refused
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

// review applies the policy to every commit and blob newSHA brings that the
// remote lacks: paths against the deny globs, blob sizes against the caps.
func (m *Mirrors) review(ctx context.Context, dir, newSHA string, refuse func(rule, path, format string, args ...any), res *Result) error {
	not := []string{"--not", "--exclude=" + incomingPrefix + "*", "--all"}
	out, err := m.run(ctx, dir, nil, nil, append([]string{"rev-list", "--count", newSHA}, not...)...)
	if err != nil {
		return err
	}
	res.Commits, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	// Every path a new commit adds or changes, in any commit (a secret added
	// then deleted is still in history).
	out, err = m.run(ctx, dir, nil, nil, append([]string{"log", "-z", "--format=", "--name-only", "--no-renames",
		"--diff-filter=d", "-m", newSHA}, not...)...)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var denied []string
	for _, p := range bytes.Split(out, []byte{0}) {
		p := strings.TrimLeft(string(p), "\n")
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		if m.policy.Denied(p) != "" {
			denied = append(denied, p)
		}
	}
	sort.Strings(denied)
	for _, p := range denied {
		refuse(RuleDenyGlob, p, "matches deny glob %q", m.policy.Denied(p))
	}
	// Every new object with its path; the blobs' sizes from cat-file.
	out, err = m.run(ctx, dir, nil, nil, append([]string{"rev-list", "--objects", "--no-object-names", newSHA}, not...)...)
	if err != nil {
		return err
	}
	withNames, err := m.run(ctx, dir, nil, nil, append([]string{"rev-list", "--objects", newSHA}, not...)...)
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
	sizes, err := m.run(ctx, dir, nil, bytes.NewReader(out), "cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)")
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

// rev resolves rev in dir; "" without error when it does not exist.
func (m *Mirrors) rev(ctx context.Context, dir, rev string) (string, error) {
	out, err := m.run(ctx, dir, nil, nil, "rev-parse", "--verify", "--quiet", rev)
	if err != nil {
		return "", nil
	}
	return strings.TrimSpace(string(out)), nil
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
