package main

import (
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

func TestGitRecordRemoteFor(t *testing.T) {
	dir := t.TempDir()
	repos := []provider.RepoSpec{
		{RepoURL: "https://example.com/app.git", Token: "secret", WorkspacePath: "app"},
		{RepoURL: "https://example.com/lib.git", WorkspacePath: "lib"},
	}
	if err := writeGitRecord(dir, "sb-1", repos); err != nil {
		t.Fatal(err)
	}
	rec, err := readGitRecord(dir, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{"/home/user/workspace/app", "https://example.com/app.git"},
		{"/home/user/workspace/app/", "https://example.com/app.git"},
		{"/root/workspace/lib", "https://example.com/lib.git"},
		{"/home/user/workspace/evil", ""},
		{"/home/user/workspace/x/app", ""},
		{"/home/user/workspace/myapp", ""},
		{"/home/user/app", ""},
	}
	for _, tt := range tests {
		if got := rec.remoteFor(tt.path); got != tt.want {
			t.Errorf("remoteFor(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
	if none, err := readGitRecord(dir, "sb-2"); err != nil || len(none.Repos) != 0 {
		t.Errorf("readGitRecord of an unrecorded sandbox = %+v, %v; want empty", none, err)
	}
	for _, id := range []string{"", ".", "..", "a/b", "../x", "a\\b"} {
		if f := gitRecordFile(dir, id); f != "" {
			t.Errorf("gitRecordFile(%q) = %q, want none", id, f)
		}
	}
	removeGitRecord(dir, "sb-1")
	if rec, _ := readGitRecord(dir, "sb-1"); len(rec.Repos) != 0 {
		t.Errorf("record after removeGitRecord = %+v", rec)
	}
}
