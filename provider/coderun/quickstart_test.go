package coderun

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// quickStartDoc is the documentation whose quick start TestQuickStart runs.
const quickStartDoc = "../../docs/code-execution.md"

var (
	tomlBlock = regexp.MustCompile("(?s)```toml\n(.*?)```")
	heredoc   = regexp.MustCompile("(?s)<<'EOF'\n(.*?)\nEOF\n")
	searchCmd = regexp.MustCompile(`search "([^"]+)"`)
)

// The quick start of docs/code-execution.md runs as written: its config loads, its
// snippet gives the result the text promises, and its search finds the package from
// its own README.
func TestQuickStart(t *testing.T) {
	b, err := os.ReadFile(quickStartDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Quick start")
	end := strings.Index(doc, "\n## Overview")
	if start < 0 || end < start {
		t.Fatalf("%s has no quick start section before its overview", quickStartDoc)
	}
	qs := doc[start:end]
	toml, code, query := tomlBlock.FindStringSubmatch(qs), heredoc.FindStringSubmatch(qs), searchCmd.FindStringSubmatch(qs)
	if toml == nil || code == nil || query == nil {
		t.Fatalf("the quick start lacks its toml block, its run heredoc or its search:\n%s", qs)
	}
	c, err := Parse([]byte(toml[1]), os.Getenv)
	if err != nil {
		t.Fatalf("the quick start's config: %v", err)
	}
	r, _ := newRunner(t, c, Options{ReapEvery: -1})
	if _, err := r.EnsureSnapshot(t.Context()); err != nil {
		t.Fatal(err)
	}
	s := session(t, r, "quickstart")
	res := run(t, s, code[1])
	if !res.Success || string(res.Result) != "2" || !strings.Contains(qs, "`result` 2") {
		t.Errorf("the quick start's snippet = %+v, want result 2 as the text says", res)
	}
	found, err := r.Search(t.Context(), query[1], "", 3)
	if err != nil || len(found.Results) == 0 || found.Results[0].Package != "ms" || !strings.HasPrefix(found.Results[0].Source, "npm:ms@2.1.3/") {
		t.Errorf("the quick start's search = %+v, %v; want ms's own README", found.Results, err)
	}
}
