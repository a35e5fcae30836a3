package api

import (
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// BundleContentType is the media type of a git bundle on the wire.
const BundleContentType = apitype.GitBundleContentType

// GitBundler moves commits in and out of the sandbox without a credential: the
// host takes a bundle of the agent's branch and pushes it itself, and hands the
// sandbox bundles of the remote. A Git that also implements it serves
// /api/git/bundle and /api/git/changeset; otherwise they answer 501.
type GitBundler interface {
	// CreateBundle returns a bundle of the repo's current branch with every
	// commit base lacks; the caller closes the file.
	CreateBundle(ctx context.Context, id, base string) (*os.File, apitype.GitBundleInfo, error)
	ApplyBundle(ctx context.Context, id string, r io.Reader) ([]apitype.GitRefUpdate, error)
	Changeset(ctx context.Context, id, base string) (apitype.GitChangesetResponse, error)
}

// bundleRepo is the bundler and the repo id of a bundle route: 501 when the
// Git does not move bundles, 400 without ?repo=.
func (s *Server) bundleRepo(r *http.Request) (GitBundler, string, error) {
	b, ok := s.opts.Git.(GitBundler)
	if !ok {
		return nil, "", errNotImplemented
	}
	id, err := repoParam(r)
	return b, id, err
}

// gitBundle streams a bundle of the repo's current branch since base.
func (s *Server) gitBundle(w http.ResponseWriter, r *http.Request) error {
	g, id, err := s.bundleRepo(r)
	if err != nil {
		return err
	}
	b, info, err := g.CreateBundle(r.Context(), id, r.URL.Query().Get("base"))
	if err != nil {
		return gitBundleError(err)
	}
	defer b.Close()
	h := w.Header()
	h.Set("Content-Type", BundleContentType)
	h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	h.Set(apitype.HeaderGitBranch, info.Branch)
	h.Set(apitype.HeaderGitHead, info.Head)
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
	g, id, err := s.bundleRepo(r)
	if err != nil {
		return err
	}
	base := r.URL.Query().Get("base")
	if base == "" {
		return fault.New(http.StatusBadRequest, "base query parameter is required")
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
	g, id, release, err := s.admitBundle(w, r)
	if err != nil {
		// Refused unread: the connection closes rather than wait up to the
		// route's 10-minute read deadline for a body nobody will read.
		closeUnread(w)
		return err
	}
	defer release()
	up, err := g.ApplyBundle(r.Context(), id, clientBody{r.Body})
	if err != nil {
		return gitBundleError(err)
	}
	writeJSON(w, http.StatusOK, apitype.GitBundleApplyResponse{Updated: up})
	return nil
}

// admitBundle checks an upload from its headers alone: the bundler and repo,
// the content type, a declared size within the cap (413 at once, not after
// reading the cap's worth of body), and a free upload slot (503 past
// rules.MaxBundleUploads at once); release gives the slot back.
func (s *Server) admitBundle(w http.ResponseWriter, r *http.Request) (GitBundler, string, func(), error) {
	g, id, err := s.bundleRepo(r)
	if err != nil {
		return nil, "", nil, err
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != BundleContentType && mt != "application/octet-stream") {
			return nil, "", nil, fault.New(http.StatusBadRequest, "Content-Type must be %s", BundleContentType)
		}
	}
	if r.ContentLength > rules.MaxGitBundleBytes {
		return nil, "", nil, &fault.Error{Status: http.StatusRequestEntityTooLarge, Msg: "Bundle too large",
			Fields: map[string]any{"limit": rules.MaxGitBundleBytes}}
	}
	select {
	case s.bundleSlots <- struct{}{}:
		return g, id, func() { <-s.bundleSlots }, nil
	default:
		w.Header().Set("Retry-After", "10")
		return nil, "", nil, fault.New(http.StatusServiceUnavailable,
			"too many bundle uploads at once: the limit is %d; retry when one has ended", cap(s.bundleSlots))
	}
}

// gitBundleError answers a body past the route's cap as the git leaf answers
// a bundle past its own: 413 with the "limit"; the leaf's other failures
// carry their status.
func gitBundleError(err error) error {
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return &fault.Error{Status: http.StatusRequestEntityTooLarge, Msg: "Bundle too large",
			Fields: map[string]any{"limit": mbe.Limit}, Err: err}
	}
	if be := (*bodyError)(nil); errors.As(err, &be) {
		// The client's failure (a malformed chunk, a body cut short, an
		// upload slower than the read deadline), not the sidecar's.
		if ne := net.Error(nil); errors.As(be.err, &ne) && ne.Timeout() {
			return &fault.Error{Status: http.StatusRequestTimeout, Msg: "Bundle did not arrive in time", Err: err}
		}
		return &fault.Error{Status: http.StatusBadRequest, Msg: "read bundle: " + be.err.Error(), Err: err}
	}
	return err
}

// bodyError is a failure to read the request body.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "read request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// clientBody marks the failures of reading a request body (anything but
// io.EOF) as bodyError, so a leaf that reads the body and wraps what failed
// still lets the API answer the client's fault with a 4xx.
type clientBody struct{ r io.Reader }

func (b clientBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = &bodyError{err}
	}
	return n, err
}
