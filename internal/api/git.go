package api

import (
	"context"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// Git answers the workspace's git questions (internal/gitrepo). Status and
// Diff fail with a 400 *fault.Error for an id that names no repository of the
// workspace, and Diff for a path leaving the repository.
type Git interface {
	Repos(ctx context.Context) ([]apitype.GitRepo, error)
	Status(ctx context.Context, id string) (apitype.GitStatusResponse, error)
	Diff(ctx context.Context, id, path string) (string, error)
}

func (s *Server) gitRepos(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Git == nil {
		return errNotImplemented
	}
	repos, err := s.opts.Git.Repos(r.Context())
	if err != nil {
		return err
	}
	if repos == nil {
		repos = []apitype.GitRepo{}
	}
	writeJSON(w, http.StatusOK, apitype.GitReposResponse{Repos: repos})
	return nil
}

func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Git == nil {
		return errNotImplemented
	}
	id, err := repoParam(r)
	if err != nil {
		return err
	}
	st, err := s.opts.Git.Status(r.Context(), id)
	if err != nil {
		return err
	}
	if st.Files == nil {
		st.Files = []apitype.GitFile{}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) gitDiff(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Git == nil {
		return errNotImplemented
	}
	id, err := repoParam(r)
	if err != nil {
		return err
	}
	diff, err := s.opts.Git.Diff(r.Context(), id, r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, apitype.GitDiffResponse{Diff: diff})
	return nil
}

func repoParam(r *http.Request) (string, error) {
	id := r.URL.Query().Get("repo")
	if id == "" {
		return "", fault.New(http.StatusBadRequest, "repo query parameter is required")
	}
	return id, nil
}
