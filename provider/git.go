package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// BuildGitCredentialsMap maps every spelling of each repo URL git may ask about (with
// and without .git and a trailing slash) to the repo's token. Repos without a token or
// URL are skipped; on collision the later repo wins.
func BuildGitCredentialsMap(repos []RepoSpec) map[string]string {
	out := map[string]string{}
	for _, r := range repos {
		raw := strings.TrimSpace(r.RepoURL)
		if r.Token == "" || raw == "" {
			continue
		}
		noSlash := strings.TrimRight(raw, "/")
		noGit := strings.TrimSuffix(noSlash, ".git")
		withGit := noGit
		if !strings.HasSuffix(withGit, ".git") {
			withGit += ".git"
		}
		for _, k := range []string{raw, noSlash, noGit, withGit, noGit + "/", withGit + "/"} {
			if k != "" && k != "/" {
				out[k] = r.Token
			}
		}
	}
	return out
}

// SessionMetadata is the JSON the boot writes to Paths.MetadataFile.
type SessionMetadata struct {
	SessionID string `json:"sessionId"`
	RepoDir   string `json:"repoDir"`
	CreatedAt int64  `json:"createdAt"` // epoch milliseconds
	// LastGitFetchAt is when the repos were last cloned or pulled (epoch milliseconds).
	LastGitFetchAt *int64 `json:"lastGitFetchAt,omitempty"`
}

// ParseSessionMetadata is the metadata file's content b, as read with err;
// nil when it could not be read or is not the JSON the boot writes (a
// sandbox without metadata restores like a legacy one).
func ParseSessionMetadata(b []byte, err error) *SessionMetadata {
	if err != nil {
		return nil
	}
	var m SessionMetadata
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return &m
}

// PullDecision are the inputs of ShouldPullOnRestore.
type PullDecision struct {
	Enabled        bool // SANDBOX_GIT_PULL_ON_RESTORE
	HasSnapshot    bool // restoring from a snapshot
	RepoCount      int
	CadenceSeconds int    // SANDBOX_GIT_PULL_CADENCE_SECONDS; <= 0 means every restore
	LastGitFetchAt *int64 // epoch ms; nil means never
	Now            time.Time
}

// ShouldPullOnRestore decides whether a restore pulls its repos: only when enabled,
// restoring a snapshot with repos, and either the cadence is 0, the repos were never
// fetched, or more than the cadence has passed since (strictly greater). A zero Now
// means the current time.
func ShouldPullOnRestore(d PullDecision) bool {
	if !d.Enabled || !d.HasSnapshot || d.RepoCount == 0 {
		return false
	}
	if d.CadenceSeconds <= 0 || d.LastGitFetchAt == nil {
		return true
	}
	now := d.Now
	if now.IsZero() {
		now = time.Now()
	}
	return now.UnixMilli()-*d.LastGitFetchAt > int64(d.CadenceSeconds)*1000
}

// ExecResult is the outcome of a command that ran.
type ExecResult struct {
	Stdout   string
	Stderr   string
	ExitCode int
}

// Executor runs commands and file operations inside one sandbox. Run returns an error
// only when the command could not be run or timed out; a command that ran and failed
// reports its exit code, which callers check explicitly.
type Executor interface {
	Run(ctx context.Context, command string, timeout time.Duration) (ExecResult, error)
	ReadFile(ctx context.Context, path string) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
}

// PullOptions are the inputs of PullOnRestore.
type PullOptions struct {
	Paths          Paths
	Repos          []RepoSpec
	Enabled        bool
	HasSnapshot    bool
	CadenceSeconds int
	Now            func() time.Time
	// Log receives one line per repo; nil discards.
	Log func(string)
}

// PullResult says what PullOnRestore did.
type PullResult struct {
	Pulled          bool // the pull branch ran
	AllSucceeded    bool
	MetadataWritten bool
}

// PullOnRestore refreshes the git credentials of a restored sandbox and, when
// ShouldPullOnRestore says so, fast-forwards every repo and records lastGitFetchAt.
//
// The credentials file is rewritten on every restore, even when not pulling and even
// when empty, so a snapshot never keeps serving a stale or revoked token (the old
// Modal flavour only wrote it when pulling). A pull counts as failed when its exit
// code is not 0 (the old Modal flavour never looked at it); failures are logged and
// the next repo is tried, and lastGitFetchAt is only written when every pull
// succeeded and the metadata could be read.
func PullOnRestore(ctx context.Context, ex Executor, o PullOptions) (PullResult, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	var res PullResult
	meta := ParseSessionMetadata(ex.ReadFile(ctx, o.Paths.MetadataFile()))
	var last *int64
	if meta != nil {
		last = meta.LastGitFetchAt
	}
	creds, _ := json.Marshal(BuildGitCredentialsMap(o.Repos))
	if err := ex.WriteFile(ctx, o.Paths.GitCredentialsFile(), creds, 0o600); err != nil {
		return res, fmt.Errorf("write git credentials: %w", err)
	}
	if !ShouldPullOnRestore(PullDecision{Enabled: o.Enabled, HasSnapshot: o.HasSnapshot, RepoCount: len(o.Repos),
		CadenceSeconds: o.CadenceSeconds, LastGitFetchAt: last, Now: o.Now()}) {
		return res, nil
	}
	res.Pulled, res.AllSucceeded = true, true
	for _, r := range o.Repos {
		dir := o.Paths.RepoDir(r.WorkspacePath)
		out, err := ex.Run(ctx, BuildPullCommand(dir), PullTimeout)
		switch {
		case err != nil:
			res.AllSucceeded = false
			o.Log(fmt.Sprintf("git pull %s: %s", dir, RedactSecrets(err.Error())))
		case out.ExitCode != 0:
			res.AllSucceeded = false
			o.Log(fmt.Sprintf("git pull %s: exit %d: %s", dir, out.ExitCode, RedactSecrets(CapOutput(out.Stdout+out.Stderr, 0))))
		default:
			o.Log(fmt.Sprintf("git pull %s: %s", dir, RedactSecrets(CapOutput(out.Stdout, 0))))
		}
	}
	if res.AllSucceeded && meta != nil {
		now := o.Now().UnixMilli()
		meta.LastGitFetchAt = &now
		b, _ := json.MarshalIndent(meta, "", "  ")
		if err := ex.WriteFile(ctx, o.Paths.MetadataFile(), b, 0o644); err != nil {
			o.Log(fmt.Sprintf("write metadata: %s", err))
		} else {
			res.MetadataWritten = true
		}
	}
	return res, nil
}
