package provider

import (
	"context"
	"errors"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestBuildGitCredentialsMap(t *testing.T) {
	const b = "https://github.com/org/"
	tests := []struct {
		name string
		repo RepoSpec
		want []string
	}{
		{"with .git", RepoSpec{RepoURL: b + "repo.git", Token: "t"}, []string{b + "repo.git", b + "repo", b + "repo/", b + "repo.git/"}},
		{"without .git", RepoSpec{RepoURL: b + "repo", Token: "t"}, []string{b + "repo", b + "repo.git", b + "repo/", b + "repo.git/"}},
		{"trailing slash", RepoSpec{RepoURL: b + "repo/", Token: "t"}, []string{b + "repo/", b + "repo", b + "repo.git", b + "repo.git/"}},
		{"spaces and slashes", RepoSpec{RepoURL: "  " + b + "repo.git//  ", Token: "t"}, []string{b + "repo.git//", b + "repo.git", b + "repo", b + "repo/", b + "repo.git/"}},
		{"double .git", RepoSpec{RepoURL: b + "repo.git.git", Token: "t"}, []string{b + "repo.git.git", b + "repo.git", b + "repo.git/"}},
		{"empty token", RepoSpec{RepoURL: b + "repo", Token: ""}, nil},
		{"blank url", RepoSpec{RepoURL: "   ", Token: "t"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildGitCredentialsMap([]RepoSpec{tt.repo})
			keys := []string{}
			for k, v := range got {
				if v != tt.repo.Token {
					t.Errorf("map[%q] = %q, want %q", k, v, tt.repo.Token)
				}
				keys = append(keys, k)
			}
			want := append([]string{}, tt.want...)
			sort.Strings(keys)
			sort.Strings(want)
			if diff := cmp.Diff(want, keys, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("BuildGitCredentialsMap(%q) keys mismatch (-want +got):\n%s", tt.repo.RepoURL, diff)
			}
		})
	}
	t.Run("later repo wins", func(t *testing.T) {
		got := BuildGitCredentialsMap([]RepoSpec{{RepoURL: b + "r", Token: "a"}, {RepoURL: b + "r.git", Token: "b"}})
		if got[b+"r"] != "b" {
			t.Errorf("map[r] = %q, want b", got[b+"r"])
		}
	})
}

func TestShouldPullOnRestore(t *testing.T) {
	const now = int64(1_000_000)
	ms := func(v int64) *int64 { return &v }
	base := func() PullDecision {
		return PullDecision{Enabled: true, HasSnapshot: true, RepoCount: 1, Now: time.UnixMilli(now)}
	}
	tests := []struct {
		name   string
		modify func(*PullDecision)
		want   bool
	}{
		{"none", func(*PullDecision) {}, true},
		{"lastGitFetchAt = now cadence 0", func(d *PullDecision) { d.LastGitFetchAt = ms(now) }, true},
		{"cadence 60 last now-61000", func(d *PullDecision) { d.CadenceSeconds = 60; d.LastGitFetchAt = ms(now - 61_000) }, true},
		{"cadence 3600 last undefined", func(d *PullDecision) { d.CadenceSeconds = 3600 }, true},
		{"repoCount 3", func(d *PullDecision) { d.RepoCount = 3 }, true},
		{"enabled false", func(d *PullDecision) { d.Enabled = false }, false},
		{"hasSnapshot false", func(d *PullDecision) { d.HasSnapshot = false }, false},
		{"repoCount 0", func(d *PullDecision) { d.RepoCount = 0 }, false},
		{"cadence 3600 last now-1800000", func(d *PullDecision) { d.CadenceSeconds = 3600; d.LastGitFetchAt = ms(now - 1_800_000) }, false},
		{"cadence 60 exact boundary", func(d *PullDecision) { d.CadenceSeconds = 60; d.LastGitFetchAt = ms(now - 60_000) }, false},
		{"all preconditions false", func(d *PullDecision) { *d = PullDecision{} }, false},
		{"no now cadence 1 last 0", func(d *PullDecision) { d.Now = time.Time{}; d.CadenceSeconds = 1; d.LastGitFetchAt = ms(0) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := base()
			tt.modify(&d)
			if got := ShouldPullOnRestore(d); got != tt.want {
				t.Errorf("ShouldPullOnRestore(%+v) = %v, want %v", d, got, tt.want)
			}
		})
	}
}

// fakeExec is an in-memory sandbox for PullOnRestore: files in a map, pulls answered
// by pull.
type fakeExec struct {
	files    map[string][]byte
	pull     func(cmd string) (ExecResult, error)
	pulls    []string
	writes   map[string]int
	writeErr map[string]error
}

func (f *fakeExec) Run(_ context.Context, cmd string, _ time.Duration) (ExecResult, error) {
	f.pulls = append(f.pulls, cmd)
	return f.pull(cmd)
}

func (f *fakeExec) ReadFile(_ context.Context, p string) ([]byte, error) {
	b, ok := f.files[p]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return b, nil
}

func (f *fakeExec) WriteFile(_ context.Context, p string, data []byte, _ fs.FileMode) error {
	if err := f.writeErr[p]; err != nil {
		return err
	}
	f.writes[p]++
	f.files[p] = data
	return nil
}

func TestPullOnRestore(t *testing.T) {
	p := DefaultPaths()
	now := time.UnixMilli(10_000_000)
	ok := func(string) (ExecResult, error) { return ExecResult{Stdout: "Already up to date."}, nil }
	meta := func(last int64) string {
		return `{"sessionId":"s1","repoDir":"/home/user/workspace","createdAt":1,"lastGitFetchAt":` + itoa(last) + `}`
	}
	one := []RepoSpec{{RepoURL: "https://github.com/o/a", WorkspacePath: "."}}
	two := []RepoSpec{{RepoURL: "https://github.com/o/a", WorkspacePath: "a"}, {RepoURL: "https://github.com/o/b", WorkspacePath: "b"}}
	tests := []struct {
		name        string
		repos       []RepoSpec
		enabled     bool
		snapshot    bool
		cadence     int
		metadata    string // "" = missing
		pull        func(string) (ExecResult, error)
		writeErr    error
		wantPulled  bool
		wantWritten bool
		wantPulls   int
	}{
		{"cadence 0 one repo pull ok", one, true, true, 0, meta(1), ok, nil, true, true, 1},
		{"two repos both ok", two, true, true, 0, meta(1), ok, nil, true, true, 2},
		{"one repo pull rejects", one, true, true, 0, meta(1), func(string) (ExecResult, error) { return ExecResult{}, errors.New("timeout") }, nil, true, false, 1},
		{"two repos second rejects", two, true, true, 0, meta(1), func(c string) (ExecResult, error) {
			if strings.Contains(c, "/b'") {
				return ExecResult{}, errors.New("boom")
			}
			return ExecResult{}, nil
		}, nil, true, false, 2},
		// Quirk decided: a non-zero exit is a failed pull on every provider.
		{"pull exits non-zero", one, true, true, 0, meta(1), func(string) (ExecResult, error) {
			return ExecResult{ExitCode: 1, Stdout: "fatal: Not possible to fast-forward"}, nil
		}, nil, true, false, 1},
		{"metadata write rejects", one, true, true, 0, meta(1), ok, errors.New("disk full"), true, false, 1},
		{"metadata null legacy", one, true, true, 0, "", ok, nil, true, false, 1},
		{"cadence 300 last 10s ago", one, true, true, 300, meta(now.UnixMilli() - 10_000), ok, nil, false, false, 0},
		{"cadence 300 last 600s ago", one, true, true, 300, meta(now.UnixMilli() - 600_000), ok, nil, true, true, 1},
		{"feature disabled", one, false, true, 0, meta(1), ok, nil, false, false, 0},
		{"no snapshot", one, true, false, 0, meta(1), ok, nil, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeExec{files: map[string][]byte{}, pull: tt.pull, writes: map[string]int{}, writeErr: map[string]error{}}
			if tt.metadata != "" {
				f.files[p.MetadataFile()] = []byte(tt.metadata)
			}
			if tt.writeErr != nil {
				f.writeErr[p.MetadataFile()] = tt.writeErr
			}
			res, err := PullOnRestore(t.Context(), f, PullOptions{Paths: p, Repos: tt.repos, Enabled: tt.enabled,
				HasSnapshot: tt.snapshot, CadenceSeconds: tt.cadence, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatalf("PullOnRestore: %v", err)
			}
			if res.Pulled != tt.wantPulled || res.MetadataWritten != tt.wantWritten || len(f.pulls) != tt.wantPulls {
				t.Errorf("PullOnRestore = %+v with %d pulls, want pulled %v written %v pulls %d", res, len(f.pulls), tt.wantPulled, tt.wantWritten, tt.wantPulls)
			}
			if got := f.writes[p.MetadataFile()]; (got == 1) != tt.wantWritten {
				t.Errorf("metadata writes = %d, want written %v", got, tt.wantWritten)
			}
			// Quirk decided: credentials are rewritten on every restore.
			if f.writes[p.GitCredentialsFile()] != 1 {
				t.Errorf("credential writes = %d, want 1", f.writes[p.GitCredentialsFile()])
			}
			if tt.wantWritten {
				got := string(f.files[p.MetadataFile()])
				if !strings.Contains(got, `"sessionId": "s1"`) || !strings.Contains(got, `"lastGitFetchAt": `+itoa(now.UnixMilli())) {
					t.Errorf("metadata = %s, want sessionId kept and lastGitFetchAt = now", got)
				}
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestParseSessionMetadata(t *testing.T) {
	at := int64(1700000000000)
	tests := []struct {
		name string
		b    string
		err  error
		want *SessionMetadata
	}{
		{"metadata", `{"sessionId":"s1","repoDir":"/home/user/workspace","lastGitFetchAt":1700000000000}`, nil,
			&SessionMetadata{SessionID: "s1", RepoDir: "/home/user/workspace", LastGitFetchAt: &at}},
		{"unreadable", `{"sessionId":"s1"}`, errors.New("no such file"), nil},
		{"not JSON", `{"sessionId":`, nil, nil},
	}
	for _, tt := range tests {
		got := ParseSessionMetadata([]byte(tt.b), tt.err)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}
