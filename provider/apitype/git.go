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
