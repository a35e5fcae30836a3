package apitype

// GitRepo is one entry of GET /api/git/repos; ID is the standard base64 of Path.
type GitRepo struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// GitReposResponse is the body of GET /api/git/repos.
type GitReposResponse struct {
	Repos []GitRepo `json:"repos"`
}

// GitFile is one changed file; Status is the porcelain XY code, "?" for untracked.
type GitFile struct {
	Status string `json:"status"`
	Path   string `json:"path"`
}

// GitStatusResponse is the body of GET /api/git/status.
type GitStatusResponse struct {
	Branch string    `json:"branch"`
	Ahead  int       `json:"ahead"`
	Behind int       `json:"behind"`
	Files  []GitFile `json:"files"`
}

// GitDiffResponse is the body of GET /api/git/diff.
type GitDiffResponse struct {
	Diff string `json:"diff"`
}

// GitCommit is one commit of a GitChangeset.
type GitCommit struct {
	SHA     string `json:"sha"`
	Subject string `json:"subject"`
	// Author is "Name <email>".
	Author string `json:"author"`
}

// GitChangedFile is one file of a GitChangeset. Status is git's one-letter
// code (A, M, D, R, C, T); OldPath is set for renames and copies. Size is the
// new blob's size in bytes (0 for a deletion); Binary is git's own verdict.
type GitChangedFile struct {
	Path    string `json:"path"`
	OldPath string `json:"oldPath,omitempty"`
	Status  string `json:"status"`
	OldMode string `json:"oldMode,omitempty"`
	Mode    string `json:"mode,omitempty"`
	Binary  bool   `json:"binary"`
	Size    int64  `json:"size"`
}

// GitChangesetResponse is the body of GET /api/git/changeset: what the current
// branch holds that base does not, for a human or a policy to review.
type GitChangesetResponse struct {
	Branch  string           `json:"branch"`
	Base    string           `json:"base"` // resolved commit
	Head    string           `json:"head"`
	Commits []GitCommit      `json:"commits"`
	Files   []GitChangedFile `json:"files"`
}

// GitRefUpdate is one ref a POST /api/git/bundle moved; Old is empty for a new ref.
type GitRefUpdate struct {
	Ref string `json:"ref"`
	Old string `json:"old,omitempty"`
	New string `json:"new"`
}

// GitBundleApplyResponse is the body of POST /api/git/bundle.
type GitBundleApplyResponse struct {
	Updated []GitRefUpdate `json:"updated"`
}

// GitBundleContentType is the media type of a git bundle on the wire
// (GET and POST /api/git/bundle).
const GitBundleContentType = "application/x-git-bundle"

// Headers of GET /api/git/bundle that describe the bundle in its body.
const (
	HeaderGitBranch = "X-Git-Branch"
	HeaderGitHead   = "X-Git-Head"
)

// GitBundleInfo describes a bundle of GET /api/git/bundle: the branch and
// commit it carries (headers HeaderGitBranch and HeaderGitHead) and its size
// (Content-Length).
type GitBundleInfo struct {
	Branch string // refs/heads/<name> the bundle carries
	Head   string // its commit
	Size   int64  // bytes
}
