package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/gitrepo"
)

// Git answers the workspace's git questions. Status and Diff fail with
// gitrepo.ErrInvalidRepo for an id that names no repository of the workspace
// and Diff with gitrepo.ErrInvalidPath for a path leaving the repository.
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
		return gitError(err)
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
		return gitError(err)
	}
	writeJSON(w, http.StatusOK, apitype.GitDiffResponse{Diff: diff})
	return nil
}

func repoParam(r *http.Request) (string, error) {
	id := r.URL.Query().Get("repo")
	if id == "" {
		return "", errorf(http.StatusBadRequest, "repo query parameter is required")
	}
	return id, nil
}

// gitError maps the validation failures of the git leaf to the contract's 400s;
// anything else (git itself failing) stays a logged 500.
func gitError(err error) error {
	switch {
	case errors.Is(err, gitrepo.ErrInvalidRepo):
		return &Error{Status: http.StatusBadRequest, Msg: "Invalid repo ID", Err: err}
	case errors.Is(err, gitrepo.ErrPathTooLong):
		return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("Invalid file path: longer than %d bytes", gitrepo.MaxPathBytes), Err: err}
	case errors.Is(err, gitrepo.ErrInvalidPath):
		return &Error{Status: http.StatusBadRequest, Msg: "Invalid file path", Err: err}
	}
	return err
}
