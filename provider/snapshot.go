package provider

import "strings"

// SnapshotRepo is one repo of a configuration as ResolveSnapshotID sees it.
type SnapshotRepo struct {
	WorkspacePath string
	// Repo is nil when the repo row is missing.
	Repo *RepoSnapshot
}

// RepoSnapshot is the snapshot state of a repo.
type RepoSnapshot struct {
	SnapshotID       string
	SnapshotStatus   string
	SnapshotProvider string
}

// SnapshotInput are the inputs of ResolveSnapshotID.
type SnapshotInput struct {
	ConfigurationSnapshotID string
	SandboxProvider         Kind
	ConfigurationRepos      []SnapshotRepo
}

// ResolveSnapshotID picks the snapshot a session starts from, or "" for none: the
// configuration's snapshot for any provider; else, on Modal only, the repo snapshot of
// a configuration with exactly one repo at "." that is ready and was built on Modal
// (or records no provider). Base snapshots and images are resolved by the caller.
func ResolveSnapshotID(in SnapshotInput) string {
	if in.ConfigurationSnapshotID != "" {
		return in.ConfigurationSnapshotID
	}
	if in.SandboxProvider != KindModal || len(in.ConfigurationRepos) != 1 {
		return ""
	}
	r := in.ConfigurationRepos[0]
	if r.WorkspacePath != "." || r.Repo == nil {
		return ""
	}
	if r.Repo.SnapshotStatus != "ready" || r.Repo.SnapshotID == "" {
		return ""
	}
	if r.Repo.SnapshotProvider != "" && r.Repo.SnapshotProvider != string(KindModal) {
		return ""
	}
	return r.Repo.SnapshotID
}

// MemorySnapshotPrefix marks a memory snapshot id.
const MemorySnapshotPrefix = "mem:"

// IsMemorySnapshot reports whether id is a memory snapshot.
func IsMemorySnapshot(id string) bool { return strings.HasPrefix(id, MemorySnapshotPrefix) }

// WrapMemorySnapshotID marks a provider snapshot id as a memory snapshot.
func WrapMemorySnapshotID(id string) string { return MemorySnapshotPrefix + id }

// UnwrapMemorySnapshotID strips the memory snapshot marker, if any.
func UnwrapMemorySnapshotID(id string) string { return strings.TrimPrefix(id, MemorySnapshotPrefix) }

// KeepSandboxAfterIdleSnapshot is the gateway rule: a sandbox survives an idle
// snapshot when the snapshot lives in its memory or the provider can pause it.
func KeepSandboxAfterIdleSnapshot(snapshotID string, c Capabilities) bool {
	return IsMemorySnapshot(snapshotID) || c.SupportsPause
}
