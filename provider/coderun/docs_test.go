package coderun

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
)

// The packages' own README and type declarations are searchable without any docs
// URL, at the snapshot's versions; search_docs offers the packages as an enum, fits
// the output budget and has an outline mode.
func TestPackageDocs(t *testing.T) {
	r, _ := newRunner(t, testConfig(t, ""), Options{ReapEvery: -1})
	ctx := t.Context()
	if _, err := r.EnsureSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
	// A snapshot built by another runner has its docs indexed by IndexDocs.
	if err := r.IndexDocs(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := r.Search(ctx, "convert a time string into milliseconds", "", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) == 0 || res.Results[0].Package != "ms" || !strings.HasPrefix(res.Results[0].Source, "npm:ms@2.1.3/") {
		t.Fatalf("search = %+v, want ms's README first", res.Results)
	}
	res, err = r.Search(ctx, "options long format", "ms", 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Results, func(x docsearch.Result) bool {
		return strings.HasSuffix(x.Source, ".d.ts") && strings.Contains(x.Content, "long")
	}) {
		t.Errorf("search in ms = %+v, want a chunk of its type declarations", res.Results)
	}

	cs, end := connect(t, r)
	defer end()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name != "search_docs" {
			continue
		}
		b, _ := json.Marshal(tl.InputSchema)
		if !strings.Contains(string(b), `"enum":["is-odd","is-number","ms","@types/ms"]`) {
			t.Errorf("search_docs input schema = %s, want the packages as package's enum", b)
		}
	}
	for _, outline := range []bool{false, true} {
		out := callText(t, cs, "search_docs", map[string]any{"query": "milliseconds", "package": "ms", "k": 20, "outline": outline})
		if len(out) > 16<<10 {
			t.Errorf("search_docs (outline %v) = %d bytes, over the 16 KiB budget", outline, len(out))
		}
		var got docsearch.Results
		if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Results) == 0 {
			t.Fatalf("search_docs (outline %v) = %s, %v", outline, out, err)
		}
		for _, x := range got.Results {
			if outline && strings.Count(x.Content, "\n") > 2 {
				t.Errorf("outline content %q: want at most three lines", x.Content)
			}
		}
	}
}

// Docs from a folder: its markdown and declaration files are indexed, and a file
// removed from it leaves the index at the next indexing.
func TestDocsFolder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("guide.md", "# Guide\n## Quokka handling\nhold the quokka gently\n")
	write("types/api.d.ts", "/** Feed the wombat. */\nexport declare function feedWombat(grams: number): void;\n")
	write("notes.bin", "quokka wombat")
	c := testConfig(t, "")
	c.Dependencies[0].Docs = []string{dir}
	r, _ := newRunner(t, c, Options{ReapEvery: -1})
	if err := r.IndexDocs(t.Context()); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{"quokka": "Quokka handling", "wombat": "function feedWombat"} {
		res, err := r.Search(t.Context(), q, "is-odd", 5)
		if err != nil || len(res.Results) != 1 || res.Results[0].Title != want {
			t.Errorf("search %q = %+v, %v; want the one chunk %q", q, res.Results, err, want)
		}
	}
	if err := os.Remove(filepath.Join(dir, "guide.md")); err != nil {
		t.Fatal(err)
	}
	if err := r.IndexDocs(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res, _ := r.Search(t.Context(), "quokka", "is-odd", 5); len(res.Results) != 0 {
		t.Errorf("search after the file went = %+v, want nothing", res.Results)
	}
}

// silentServer accepts connections on loopback and never answers.
func silentServer(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String() + "/docs.md"
}

// initialize answers an MCP client on a runner whose docs URL never answers, and
// returns how long the handshake took; the connection is ended and the runner closed.
func initialize(tb testing.TB, o Options) time.Duration {
	r, err := New(context.Background(), o)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.ServeMCP(context.Background(), sr, sw, "test") }()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	d := time.Since(start)
	if err != nil {
		tb.Fatal(err)
	}
	cs.Close()
	cw.Close()
	if err := <-done; err != nil {
		tb.Errorf("ServeMCP: %v", err)
	}
	return d
}

// MCP initialize does not wait for a docs URL that never answers; the search that
// follows waits a bounded time and says the docs are still being indexed.
func TestInitializeDoesNotWaitOnDocs(t *testing.T) {
	c := testConfig(t, "")
	c.Dependencies[0].Docs = []string{silentServer(t)}
	base, _ := newRunner(t, c, Options{ReapEvery: -1})
	if _, err := base.EnsureSnapshot(t.Context()); err != nil {
		t.Fatal(err)
	}
	o := base.o
	o.DocsTimeout = time.Hour
	if d := initialize(t, o); d > 30*time.Second {
		t.Errorf("initialize took %v: it waited on the docs URL", d)
	}
	r, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.IndexDocsInBackground()
	res, err := r.Search(t.Context(), "milliseconds", "", 3)
	if err != nil || !strings.Contains(res.Note, "still being indexed") || len(res.Results) == 0 {
		t.Errorf("search while a docs URL hangs = %+v, %v; want the indexed docs and a note", res, err)
	}
}

// BenchmarkMCPInitialize is an MCP initialize handshake on a runner whose one docs URL
// never answers (a listener on loopback that accepts and stays silent).
func BenchmarkMCPInitialize(b *testing.B) {
	c := testConfig(b, "")
	c.Dependencies[0].Docs = []string{silentServer(b)}
	base, _ := newRunner(b, c, Options{ReapEvery: -1})
	if _, err := base.EnsureSnapshot(context.Background()); err != nil {
		b.Fatal(err)
	}
	o := base.o
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, initialize(b, o))
	}
	p50(b, lat)
}

// A module written under /workspace is searchable from its exports without
// save_code_modules, an edit is seen, and a deleted file's module goes.
func TestWorkspaceModulesIndexed(t *testing.T) {
	r, _ := newRunner(t, testConfig(t, ""), Options{ReapEvery: -1})
	s := session(t, r, "auto-index")
	ctx := t.Context()
	write := `await Deno.mkdir("/workspace/lib", {recursive: true});
await Deno.writeTextFile("/workspace/lib/wombat.ts", "/** Helpers that groom wombats. */\nexport function groomWombat(name: string): string { return name }\n"); 1`
	if res := run(t, s, write); !res.Success {
		t.Fatal(res)
	}
	res, err := s.SearchDocs(ctx, "groom a wombat", "", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) == 0 || res.Results[0].Source != "lib/wombat.ts" || !strings.Contains(res.Results[0].Content, "groomWombat(name: string): string") ||
		!strings.Contains(res.Results[0].Content, "Helpers that groom wombats") {
		t.Fatalf("search = %+v, want lib/wombat.ts from its exports", res.Results)
	}
	if res := run(t, s, `await Deno.writeTextFile("/workspace/lib/wombat.ts", "export const brushQuokka = 1;\n"); 1`); !res.Success {
		t.Fatal(res)
	}
	if res, _ := s.SearchDocs(ctx, "brushQuokka", "", 5); len(res.Results) == 0 || res.Results[0].Source != "lib/wombat.ts" {
		t.Errorf("search after the edit = %+v", res.Results)
	}
	if res := run(t, s, `await Deno.remove("/workspace/lib/wombat.ts"); 1`); !res.Success {
		t.Fatal(res)
	}
	if res, _ := s.SearchDocs(ctx, "brushQuokka wombat", "", 5); slices.ContainsFunc(res.Results, func(x docsearch.Result) bool { return x.Source == "lib/wombat.ts" }) {
		t.Errorf("search after the delete = %+v, want the module gone", res.Results)
	}
	// save_code_modules refuses a file that is not there.
	if err := s.SaveModules(ctx, []docsearch.Module{{Path: "lib/nothing.ts", Description: "x"}}); err == nil || !strings.Contains(err.Error(), "lib/nothing.ts") {
		t.Errorf("SaveModules of a missing file = %v, want it refused", err)
	}
}
