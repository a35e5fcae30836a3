package main

// The host's record of a sandbox's repos. Code inside a sandbox can point a
// repo's origin anywhere, so the host never asks the sandbox where to fetch
// or push with a token: create writes the repos it cloned here, on the host
// (--data-dir/git-repos/<id>.json, 0600, no token in it), and push and sync
// take their remote from this record or from --remote, nothing else.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// gitRecord is the repos sandboxctl created a sandbox with.
type gitRecord struct {
	Repos []recordedRepo `json:"repos"`
}

// recordedRepo is one repo of a gitRecord.
type recordedRepo struct {
	// URL is the remote the repo was cloned from: the only one a token goes to.
	URL    string `json:"url"`
	Branch string `json:"branch,omitempty"`
	// WorkspacePath is the repo's directory under the sandbox's workspace.
	WorkspacePath string `json:"workspacePath"`
}

// gitRecordFile is where the record of sandbox id lives; "" for an id that
// cannot name a file.
func gitRecordFile(dataDir, id string) string {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\\\x00") {
		return ""
	}
	return filepath.Join(dataDir, "git-repos", id+".json")
}

// writeGitRecord records the repos of sandbox id (without their tokens).
func writeGitRecord(dataDir, id string, repos []provider.RepoSpec) error {
	file := gitRecordFile(dataDir, id)
	if file == "" {
		return fmt.Errorf("record the repos of sandbox %q: not a file name", id)
	}
	rec := gitRecord{Repos: []recordedRepo{}}
	for _, r := range repos {
		rec.Repos = append(rec.Repos, recordedRepo{URL: r.RepoURL, Branch: r.Branch, WorkspacePath: r.WorkspacePath})
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("record the repos of sandbox %s: %w", id, err)
	}
	return atomicfile.WriteFile(file, append(data, '\n'), 0o600)
}

// readGitRecord reads the record of sandbox id; an empty one when there is none.
func readGitRecord(dataDir, id string) (gitRecord, error) {
	var rec gitRecord
	file := gitRecordFile(dataDir, id)
	if file == "" {
		return rec, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("read %s: %w", file, err)
	}
	return rec, nil
}

// removeGitRecord forgets the repos of sandbox id.
func removeGitRecord(dataDir, id string) {
	if file := gitRecordFile(dataDir, id); file != "" {
		_ = os.Remove(file)
	}
}

// remoteFor is the remote of the sandbox repo at repoPath (a path inside the
// sandbox, as its sidecar lists it): the recorded URL of the repo created at
// <workspace>/<WorkspacePath>, "" when the record has none.
func (rec gitRecord) remoteFor(repoPath string) string {
	clean := path.Clean(repoPath)
	for _, r := range rec.Repos {
		if r.WorkspacePath != "" && strings.HasSuffix(clean, "/workspace/"+path.Clean(r.WorkspacePath)) {
			return r.URL
		}
	}
	return ""
}
