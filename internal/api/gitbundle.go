package api

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/gitrepo"
)

// BundleContentType is the media type of a git bundle on the wire.
const BundleContentType = "application/x-git-bundle"

// GitBundler moves commits in and out of the sandbox without a credential: the
// host takes a bundle of the agent's branch and pushes it itself, and hands the
// sandbox bundles of the remote. A Git that also implements it serves
// /api/git/bundle and /api/git/changeset; otherwise they answer 501.
type GitBundler interface {
	CreateBundle(ctx context.Context, id, base string) (*gitrepo.Bundle, error)
	ApplyBundle(ctx context.Context, id string, r io.Reader) ([]apitype.GitRefUpdate, error)
	Changeset(ctx context.Context, id, base string) (apitype.GitChangesetResponse, error)
}

func (s *Server) bundler() (GitBundler, error) {
	b, ok := s.opts.Git.(GitBundler)
	if !ok {
		return nil, errNotImplemented
	}
	return b, nil
}

// gitBundle streams a bundle of the repo's current branch since base.
func (s *Server) gitBundle(w http.ResponseWriter, r *http.Request) error {
	g, err := s.bundler()
	if err != nil {
		return err
	}
	id, err := repoParam(r)
	if err != nil {
		return err
	}
	b, err := g.CreateBundle(r.Context(), id, r.URL.Query().Get("base"))
	if err != nil {
		return gitBundleError(err)
	}
	defer b.Close()
	h := w.Header()
	h.Set("Content-Type", BundleContentType)
	h.Set("Content-Length", strconv.FormatInt(b.Size, 10))
	h.Set("X-Git-Branch", b.Branch)
	h.Set("X-Git-Head", b.Head)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, b); err != nil {
		s.log.Warn("send bundle", "err", err)
	}
	return nil
}

// gitChangeset answers the review summary of the repo's branch since base.
func (s *Server) gitChangeset(w http.ResponseWriter, r *http.Request) error {
	g, err := s.bundler()
	if err != nil {
		return err
	}
	id, err := repoParam(r)
	if err != nil {
		return err
	}
	base := r.URL.Query().Get("base")
	if base == "" {
		return errorf(http.StatusBadRequest, "base query parameter is required")
	}
	cs, err := g.Changeset(r.Context(), id, base)
	if err != nil {
		return gitBundleError(err)
	}
	writeJSON(w, http.StatusOK, cs)
	return nil
}

// gitApplyBundle fetches a bundle from the host into refs/remotes/origin/*.
// The body is a raw bundle, bounded by the git leaf's bundle limit rather than
// the API's JSON body limit.
func (s *Server) gitApplyBundle(w http.ResponseWriter, r *http.Request) error {
	g, err := s.bundler()
	if err != nil {
		return err
	}
	id, err := repoParam(r)
	if err != nil {
		return err
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != BundleContentType && mt != "application/octet-stream") {
			return errorf(http.StatusBadRequest, "Content-Type must be %s", BundleContentType)
		}
	}
	up, err := g.ApplyBundle(r.Context(), id, r.Body)
	if err != nil {
		return gitBundleError(err)
	}
	writeJSON(w, http.StatusOK, apitype.GitBundleApplyResponse{Updated: up})
	return nil
}

// gitBundleError maps the bundle failures of the git leaf to statuses.
func gitBundleError(err error) error {
	var tl *gitrepo.TooLargeError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Msg: "Bundle too large",
			Fields: map[string]any{"limit": mbe.Limit}, Err: err}
	case errors.As(err, &tl):
		return &Error{Status: http.StatusRequestEntityTooLarge, Msg: "Bundle too large",
			Fields: map[string]any{"limit": tl.Limit}, Err: err}
	case errors.Is(err, gitrepo.ErrBadRevision):
		return &Error{Status: http.StatusBadRequest, Msg: "Invalid revision", Err: err}
	case errors.Is(err, gitrepo.ErrBadBundle):
		return &Error{Status: http.StatusBadRequest, Msg: "Invalid bundle", Err: err}
	case errors.Is(err, gitrepo.ErrNothingNew):
		return &Error{Status: http.StatusConflict, Msg: "No commits since base", Err: err}
	case errors.Is(err, gitrepo.ErrNoBranch):
		return &Error{Status: http.StatusConflict, Msg: "HEAD is not on a branch", Err: err}
	}
	return gitError(err)
}
