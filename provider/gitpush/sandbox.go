package gitpush

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// PushSandbox pushes the current branch of the repo repoID of a sandbox, read
// through its sidecar (GET /api/git/bundle), to refs/heads/session/<sessionID>
// of the remote, with Push's checks. The bundle is asked for since the
// session branch's commit, else since the sandbox's origin/<branch>, else
// whole: the first base the sandbox knows keeps it small.
func (m *Mirrors) PushSandbox(ctx context.Context, sc *sidecar.Client, repoID string, r Remote, sessionID string) (Result, error) {
	target, err := TargetRef(sessionID)
	if err != nil {
		return Result{}, err
	}
	st, err := sc.GitStatus(ctx, repoID)
	if err != nil {
		return Result{}, fmt.Errorf("sandbox git status: %w", err)
	}
	dir, err := m.Update(ctx, r)
	if err != nil {
		return Result{}, err
	}
	var bases []string
	unlock := m.lock(dir)
	pushed, _ := m.rev(ctx, dir, nil, target)
	unlock()
	if pushed != "" {
		bases = append(bases, pushed)
	}
	if st.Branch != "" && st.Branch != "(detached)" {
		bases = append(bases, "origin/"+st.Branch)
	}
	bases = append(bases, "")
	for _, base := range bases {
		var buf bytes.Buffer
		_, err := sc.GitBundle(ctx, repoID, base, &buf)
		var ae *sidecar.APIError
		switch {
		case err == nil:
			return m.Push(ctx, r, sessionID, &buf)
		case errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Message == "No commits since base":
			res := Result{Ref: target, UpToDate: true}
			if base == pushed {
				res.SHA, res.Old = pushed, pushed
			}
			return res, nil
		case errors.As(err, &ae) && ae.Status == http.StatusBadRequest && ae.Message == "Invalid revision":
			continue // the sandbox does not know this base
		default:
			return Result{Ref: target}, fmt.Errorf("sandbox bundle: %w", err)
		}
	}
	return Result{Ref: target}, errors.New("sandbox bundle: no base worked")
}

// SyncResult is what SyncSandbox did.
type SyncResult struct {
	Branch  string                 `json:"branch"`
	SHA     string                 `json:"sha"`
	Updated []apitype.GitRefUpdate `json:"updated"`
	// UpToDate says the sandbox already had the remote's branch.
	UpToDate bool `json:"upToDate,omitempty"`
}

// SyncSandbox brings refs/remotes/origin/<branch> of the repo repoID of a
// sandbox up to date with the remote, branch being the sandbox's current
// branch: the host fetches with the token and the sandbox receives a bundle
// (POST /api/git/bundle) of what it lacks. Nothing in the sandbox holds a
// credential, and its own branches and work tree do not move.
func (m *Mirrors) SyncSandbox(ctx context.Context, sc *sidecar.Client, repoID string, r Remote) (SyncResult, error) {
	st, err := sc.GitStatus(ctx, repoID)
	if err != nil {
		return SyncResult{}, fmt.Errorf("sandbox git status: %w", err)
	}
	if st.Branch == "" || st.Branch == "(detached)" {
		return SyncResult{}, errors.New("the sandbox's repo is not on a branch")
	}
	res := SyncResult{Branch: st.Branch, Updated: []apitype.GitRefUpdate{}}
	var haves []string
	// The changeset resolves origin/<branch> for us; a sandbox without it has nothing.
	if cs, err := sc.GitChangeset(ctx, repoID, "origin/"+st.Branch); err == nil {
		haves = append(haves, cs.Base)
	}
	var buf bytes.Buffer
	b, err := m.Bundle(ctx, r, st.Branch, haves, &buf)
	res.SHA = b.SHA
	if errors.Is(err, ErrUpToDate) {
		res.UpToDate = true
		return res, nil
	}
	if err != nil {
		return res, err
	}
	up, err := sc.GitApplyBundle(ctx, repoID, &buf)
	if err != nil {
		return res, fmt.Errorf("sandbox apply bundle: %w", err)
	}
	res.Updated = up
	return res, nil
}
