package provider

import "testing"

func TestResolveSnapshotID(t *testing.T) {
	repo := func(wp string, r *RepoSnapshot) SnapshotRepo { return SnapshotRepo{WorkspacePath: wp, Repo: r} }
	ready := func(id string) *RepoSnapshot { return &RepoSnapshot{SnapshotID: id, SnapshotStatus: "ready"} }
	tests := []struct {
		name     string
		config   string
		provider Kind
		repos    []SnapshotRepo
		want     string
	}{
		{"config snapshot wins", "config-snap-1", KindModal, []SnapshotRepo{repo(".", ready("repo-snap-1"))}, "config-snap-1"},
		{"modal repo snapshot", "", KindModal, []SnapshotRepo{repo(".", ready("repo-snap-1"))}, "repo-snap-1"},
		{"null provider", "", "", []SnapshotRepo{repo(".", ready("repo-snap-1"))}, ""},
		{"e2b provider", "", KindE2B, []SnapshotRepo{repo(".", ready("repo-snap-1"))}, ""},
		{"two repos", "", KindModal, []SnapshotRepo{repo(".", ready("a")), repo("backend", ready("b"))}, ""},
		{"workspacePath frontend", "", KindModal, []SnapshotRepo{repo("frontend", ready("repo-snap-1"))}, ""},
		{"status building", "", KindModal, []SnapshotRepo{repo(".", &RepoSnapshot{SnapshotID: "x", SnapshotStatus: "building"})}, ""},
		{"status null", "", KindModal, []SnapshotRepo{repo(".", &RepoSnapshot{SnapshotID: "x"})}, ""},
		{"id null ready", "", KindModal, []SnapshotRepo{repo(".", ready(""))}, ""},
		{"built on e2b", "", KindModal, []SnapshotRepo{repo(".", &RepoSnapshot{SnapshotID: "repo-snap-1", SnapshotStatus: "ready", SnapshotProvider: "e2b"})}, ""},
		{"built on modal", "", KindModal, []SnapshotRepo{repo(".", &RepoSnapshot{SnapshotID: "repo-snap-1", SnapshotStatus: "ready", SnapshotProvider: "modal"})}, "repo-snap-1"},
		{"provider null", "", KindModal, []SnapshotRepo{repo(".", ready("repo-snap-1"))}, "repo-snap-1"},
		{"repo row null", "", KindModal, []SnapshotRepo{repo(".", nil)}, ""},
		{"no repos", "", KindModal, nil, ""},
		{"config snap e2b", "config-snap", KindE2B, []SnapshotRepo{repo(".", ready("r"))}, "config-snap"},
		{"config snap modal", "config-snap", KindModal, []SnapshotRepo{repo(".", ready("r"))}, "config-snap"},
		{"repo snap", "", KindModal, []SnapshotRepo{repo(".", ready("repo-snap"))}, "repo-snap"},
		{"repo id null", "", KindModal, []SnapshotRepo{repo(".", &RepoSnapshot{SnapshotStatus: "ready"})}, ""},
		{"e2b ready", "", KindE2B, []SnapshotRepo{repo(".", ready("r"))}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := SnapshotInput{ConfigurationSnapshotID: tt.config, SandboxProvider: tt.provider, ConfigurationRepos: tt.repos}
			if got := ResolveSnapshotID(in); got != tt.want {
				t.Errorf("ResolveSnapshotID(%+v) = %q, want %q", in, got, tt.want)
			}
		})
	}
}

func TestMemorySnapshotIDs(t *testing.T) {
	tests := []struct {
		id      string
		isMem   bool
		unwrap  string
		keepE2B bool
		keepMod bool
	}{
		{"mem:abc", true, "abc", true, true},
		{"im-abc", false, "im-abc", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if got := IsMemorySnapshot(tt.id); got != tt.isMem {
				t.Errorf("IsMemorySnapshot(%q) = %v, want %v", tt.id, got, tt.isMem)
			}
			if got := UnwrapMemorySnapshotID(tt.id); got != tt.unwrap {
				t.Errorf("UnwrapMemorySnapshotID(%q) = %q, want %q", tt.id, got, tt.unwrap)
			}
			if got := KeepSandboxAfterIdleSnapshot(tt.id, Capabilities{SupportsPause: true}); got != tt.keepE2B {
				t.Errorf("KeepSandboxAfterIdleSnapshot(%q, pause) = %v, want %v", tt.id, got, tt.keepE2B)
			}
			if got := KeepSandboxAfterIdleSnapshot(tt.id, Capabilities{}); got != tt.keepMod {
				t.Errorf("KeepSandboxAfterIdleSnapshot(%q, no pause) = %v, want %v", tt.id, got, tt.keepMod)
			}
		})
	}
	if got := WrapMemorySnapshotID("abc"); got != "mem:abc" {
		t.Errorf("WrapMemorySnapshotID = %q", got)
	}
}
