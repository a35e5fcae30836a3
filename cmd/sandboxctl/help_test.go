package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/clitest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// TestEveryCommandHasAnExample walks the whole command tree: every command
// and subcommand, groups and the root included, shows an example in its help,
// and every example line runs sandboxctl (or feeds it).
func TestEveryCommandHasAnExample(t *testing.T) {
	root := newCmdRoot(newFactory(func(string) string { return "" }, strings.NewReader(""), &strings.Builder{}, &strings.Builder{}))
	paths := clitest.CommandPaths(root, nil)
	if len(paths) < 30 {
		t.Fatalf("found %d commands, want the whole tree", len(paths))
	}
	for _, p := range paths {
		cmd, _, err := root.Find(p)
		if err != nil {
			t.Fatalf("find %q: %v", p, err)
		}
		name := strings.Join(append([]string{"sandboxctl"}, p...), " ")
		if cmd.Example == "" {
			t.Errorf("%s has no example in its help", name)
			continue
		}
		runs := false
		for _, line := range strings.Split(cmd.Example, "\n") {
			if !strings.HasPrefix(line, "  ") {
				t.Errorf("%s: example line %q, want it indented", name, line)
			}
			runs = runs || strings.Contains(line, "sandboxctl")
		}
		if !runs {
			t.Errorf("%s: no example line runs sandboxctl:\n%s", name, cmd.Example)
		}
	}
}

// TestEveryRunnableCommandTakesRunF: each command that runs calls the runF it
// was built with, and nothing else, so tests reach every command's options.
func TestEveryRunnableCommandTakesRunF(t *testing.T) {
	called := 0
	f := newFactory(func(string) string { return "" }, strings.NewReader(""), &strings.Builder{}, &strings.Builder{})
	record := func(o any) error { called++; return nil }
	for _, tt := range []struct {
		cmd  *cobra.Command
		args []string
	}{
		{NewCmdImageBuild(f, func(o *ImageBuildOptions) error { return record(o) }), nil},
		{NewCmdImageList(f, func(o *ImageListOptions) error { return record(o) }), nil},
		{NewCmdImageRm(f, func(o *ImageRefsOptions) error { return record(o) }), []string{"x"}},
		{NewCmdImagePull(f, func(o *ImageRefsOptions) error { return record(o) }), []string{"x"}},
		{NewCmdImageImport(f, func(o *ImageImportOptions) error { return record(o) }), []string{"-"}},
		{NewCmdImageDockerfile(f, func(o *ImageDockerfileOptions) error { return record(o) }), nil},
		{NewCmdServe(f, func(o *ServeOptions) error { return record(o) }), []string{"--protocol", "e2b"}},
		{NewCmdPush(f, func(o *PushOptions) error { return record(o) }), []string{"id"}},
		{NewCmdSync(f, func(o *PushOptions) error { return record(o) }), []string{"id"}},
		{NewCmdCode(f, func(o *CodeOptions) error { return record(o) }), []string{"--config", "c.toml", "snapshot"}},
		{NewCmdCode(f, func(o *CodeOptions) error { return record(o) }), []string{"--config", "c.toml", "mcp"}},
		{NewCmdCode(f, func(o *CodeOptions) error { return record(o) }), []string{"--config", "c.toml", "gc"}},
		{NewCmdCode(f, func(o *CodeOptions) error { return record(o) }), []string{"--config", "c.toml", "close", "--session", "s"}},
	} {
		before := called
		tt.cmd.SetArgs(tt.args)
		tt.cmd.SetOut(&strings.Builder{})
		tt.cmd.SetErr(&strings.Builder{})
		if err := tt.cmd.ExecuteContext(t.Context()); err != nil || called != before+1 {
			t.Errorf("%s %q = %v, runF called %d times; want it called once", tt.cmd.Name(), tt.args, err, called-before)
		}
	}
}

func TestImageFlags(t *testing.T) {
	builds := []struct {
		args []string
		want *ImageBuildOptions
	}{
		{nil, &ImageBuildOptions{ContextDir: "."}},
		{[]string{"-f", "i.json", "--context", "ctx", "--tag", "web", "--mirror", "http://m/debian", "--binary", "sandbox-mcp=/b/s"},
			&ImageBuildOptions{File: "i.json", ContextDir: "ctx", Tag: "web", Mirror: "http://m/debian", Binaries: []string{"sandbox-mcp=/b/s"}}},
		{[]string{"--binary", "nopath"}, nil},
		{[]string{"--binary", "=/b"}, nil},
		{[]string{"extra"}, nil},
	}
	for _, tt := range builds {
		got, err := parse(t, NewCmdImageBuild, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
	list, err := parse(t, NewCmdImageList, "-a")
	check(t, []string{"list", "-a"}, list, err, &ImageListOptions{All: true})
	rm, err := parse(t, NewCmdImageRm, "a", "b")
	check(t, []string{"rm", "a", "b"}, rm, err, &ImageRefsOptions{Refs: []string{"a", "b"}})
	rm, err = parse(t, NewCmdImageRm)
	check(t, []string{"rm"}, rm, err, nil)
	pull, err := parse(t, NewCmdImagePull, "debian:bookworm-slim")
	check(t, []string{"pull", "debian:bookworm-slim"}, pull, err, &ImageRefsOptions{Refs: []string{"debian:bookworm-slim"}})
	pull, err = parse(t, NewCmdImagePull, "a", "b")
	check(t, []string{"pull", "a", "b"}, pull, err, nil)
	imp, err := parse(t, NewCmdImageImport, "-", "--name", "x:1")
	check(t, []string{"import", "-", "--name", "x:1"}, imp, err, &ImageImportOptions{File: "-", Name: "x:1"})
	df, err := parse(t, NewCmdImageDockerfile, "--e2b", "-f", "i.json")
	check(t, []string{"dockerfile", "--e2b", "-f", "i.json"}, df, err, &ImageDockerfileOptions{E2B: true, File: "i.json"})
}

func TestServeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want *ServeOptions
	}{
		{[]string{"--protocol", "modal"}, &ServeOptions{Protocol: "modal", Addr: "127.0.0.1:8080"}},
		{[]string{"--protocol", "e2b", "--addr", ":9000", "--image", "sandbox"}, &ServeOptions{Protocol: "e2b", Addr: ":9000", Image: "sandbox"}},
		{nil, nil},
		{[]string{"--protocol", "nope"}, nil},
		{[]string{"--protocol", "modal", "--image", "sandbox"}, nil},
	}
	for _, tt := range tests {
		got, err := parse(t, NewCmdServe, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
}

func TestPushSyncFlags(t *testing.T) {
	got, err := parse(t, NewCmdPush, "sb-1", "--remote", "https://x/r.git", "--token-env", "TOK", "--repo", "web", "--session", "s1")
	check(t, []string{"push"}, got, err, &PushOptions{ID: "sb-1", Session: "s1", Git: gitFlags{remote: "https://x/r.git", tokenEnv: "TOK", repo: "web"}})
	got, err = parse(t, NewCmdSync, "sb-1", "--token-env", "TOK")
	check(t, []string{"sync"}, got, err, &PushOptions{ID: "sb-1", Git: gitFlags{tokenEnv: "TOK"}})
	got, err = parse(t, NewCmdSync, "sb-1", "--session", "s1")
	check(t, []string{"sync", "--session"}, got, err, nil)
	got, err = parse(t, NewCmdPush)
	check(t, []string{"push"}, got, err, nil)
}

func TestCodeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want *CodeOptions
	}{
		{[]string{"--config", "c.toml", "run", "--session", "s1", "--description", "adds", "x.ts"},
			&CodeOptions{Config: "c.toml", Session: "s1", Description: "adds", Args: []string{"x.ts"}}},
		{[]string{"--config", "c.toml", "search", "--package", "zod", "-k", "3", "--fetch=false", "object", "schema"},
			&CodeOptions{Config: "c.toml", Package: "zod", K: 3, Args: []string{"object", "schema"}}},
		{[]string{"--config", "c.toml", "search", "q"}, &CodeOptions{Config: "c.toml", K: 5, Fetch: true, Args: []string{"q"}}},
		{[]string{"--config", "c.toml", "gc", "--ttl", "24h"}, &CodeOptions{Config: "c.toml", TTL: 24 * time.Hour}},
		{[]string{"--config", "c.toml", "snapshot"}, &CodeOptions{Config: "c.toml"}},
		{[]string{"--config", "c.toml", "gc", "--ttl", "-1h"}, nil},
		{[]string{"--config", "c.toml", "run"}, nil},
		{[]string{"--config", "c.toml", "search"}, nil},
		{[]string{"--config", "c.toml", "run", "--session", "s", "a", "b"}, nil},
		{[]string{"snapshot"}, nil},
	}
	for _, tt := range tests {
		got, err := parse(t, NewCmdCode, tt.args...)
		check(t, tt.args, got, err, tt.want)
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct{ in, want string }{
		{`image "x": image "x": not found`, `image "x": not found`},
		{`create sandbox: image "x": image "x": not found`, `create sandbox: image "x": not found`},
		{"a: b: a: b", "a: b: a: b"},
		{"plain", "plain"},
		{"x: x\nx: x: y", "x\nx: y"},
	}
	for _, tt := range tests {
		if got := errorText(errors.New(tt.in)); got != tt.want {
			t.Errorf("errorText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestErrorHints(t *testing.T) {
	err := notIsolated(fmt.Errorf("new engine: %w: operation not permitted", engine.ErrNotIsolated))
	if !errors.Is(err, engine.ErrNotIsolated) || !strings.Contains(err.Error(), "run sandboxctl as root") {
		t.Errorf("notIsolated = %q, want it to keep the cause and suggest root", err)
	}
	if i, j := strings.Index(err.Error(), "root"), strings.Index(err.Error(), "--unisolated"); i < 0 || j < i {
		t.Errorf("notIsolated = %q, want root suggested before --unisolated", err)
	}
	missing := imageError("x", fmt.Errorf("image %q: %w", "x", engine.ErrNotFound))
	if got := errorText(missing); strings.Count(got, `"x"`) != 1 || !strings.Contains(got, "sandboxctl image list") || !errors.Is(missing, engine.ErrNotFound) {
		t.Errorf("imageError(missing) = %q, want the image named once and the next step", got)
	}
	if got := imageError("x", fmt.Errorf("image %q: %w", "x", engine.ErrInUse)).Error(); strings.Count(got, `"x"`) != 1 {
		t.Errorf("imageError(in use) = %q, want the image named once", got)
	}
}
