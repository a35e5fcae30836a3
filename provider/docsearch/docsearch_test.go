package docsearch

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestChunkMarkdown(t *testing.T) {
	tests := []struct {
		name string
		md   string
		want []string // titles
	}{
		{"empty", "", nil},
		{"no headings", "just text\n", []string{"Introduction"}},
		{"doc title intro", "# SDK\nintro\n## A\na\n## B\nb\n", []string{"SDK", "A", "B"}},
		{"only doc title", "# SDK\n", []string{"SDK"}},
		{"empty section dropped", "## A\n## B\nb\n", []string{"B"}},
		{"h3 stays inside", "## A\n### A1\nx\n## B\ny\n", []string{"A", "B"}},
		{"fenced heading does not split", "## A\n```md\n## not a heading\n```\n## B\nb\n", []string{"A", "B"}},
		{"tilde fence", "## A\n~~~\n## no\n~~~\n", []string{"A"}},
		{"crlf", "## A\r\na\r\n## B\r\nb\r\n", []string{"A", "B"}},
		{"closing hashes", "## A ##\na\n", []string{"A"}},
		{"indented is not heading", "## A\n  ## B\n", []string{"A"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range ChunkMarkdown(tt.md) {
				got = append(got, c.Title)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ChunkMarkdown(%q) titles (-want +got):\n%s", tt.md, diff)
			}
		})
	}
	// A section keeps its heading and body.
	cs := ChunkMarkdown("## Install\nnpm install x\n")
	if len(cs) != 1 || cs[0].Content != "## Install\nnpm install x" {
		t.Errorf("content = %+v", cs)
	}
}

func TestChunkMarkdownSplitsLongSections(t *testing.T) {
	md := "## Big\n" + strings.Repeat("line of text é\n", 3*maxChunkBytes/15)
	cs := ChunkMarkdown(md)
	if len(cs) < 3 {
		t.Fatalf("got %d chunks, want ≥ 3", len(cs))
	}
	for _, c := range cs {
		if len(c.Content) > maxChunkBytes || c.Title != "Big" || !utf8.ValidString(c.Content) {
			t.Errorf("chunk of %d bytes titled %q", len(c.Content), c.Title)
		}
	}
}

func FuzzChunkMarkdown(f *testing.F) {
	seed, _ := os.ReadFile("testdata/sdk.md")
	f.Add(string(seed))
	f.Add("## A\n```\n## B\n")
	f.Add("# T\n## \n##\n## x ##\n")
	f.Fuzz(func(t *testing.T, md string) {
		cs := ChunkMarkdown(md)
		total := 0
		for _, c := range cs {
			if strings.TrimSpace(c.Content) == "" || c.Title == "" {
				t.Fatalf("empty chunk %+v", c)
			}
			if len(c.Content) > maxChunkBytes {
				t.Fatalf("chunk of %d bytes", len(c.Content))
			}
			if utf8.ValidString(md) && !utf8.ValidString(c.Content) {
				t.Fatalf("invalid UTF-8 from valid input")
			}
			total += len(c.Content)
		}
		if total > len(md) {
			t.Fatalf("chunks hold %d bytes of a %d-byte input", total, len(md))
		}
		// Chunking is deterministic: the hashes are stable.
		again := ChunkMarkdown(md)
		for i := range cs {
			if cs[i].Hash() != again[i].Hash() {
				t.Fatal("hash differs between runs")
			}
		}
	})
}

// openStore opens a new, empty store: a SQLite file, or the libSQL database of
// remote (emptied first) while a suite runs there.
func openStore(t testing.TB, emb *Embedder) *Store {
	t.Helper()
	o := Options{Path: filepath.Join(t.TempDir(), "index.db"), Embedder: emb}
	if remote != nil {
		o.URL, o.Token = remote.url, remote.token
		remote.reset(t)
	}
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// docsServer serves testdata/sdk.md and counts requests.
func docsServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	md, err := os.ReadFile("testdata/sdk.md")
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/sdk.md" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/markdown")
		w.Write(md)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// rankingQueries are written from the topics of sdk.md's headings, not their words.
var rankingQueries = []struct{ query, want string }{
	{"how do I install the package", "Installation"},
	{"api key for the client constructor", "Authentication"},
	{"create a new issue with a title", "Creating issues"},
	{"get the next page of results", "Pagination"},
	{"verify the signature of an event delivery", "Webhooks"},
	{"too many requests throttled retry", "Rate limits"},
	{"catch an error and read its type", "Error handling"},
	{"list team members", "Teams"},
	{"add a comment to an issue", "Comments"},
	{"upload an attachment file", "File uploads"},
}

// checkRanking checks that each query's section is within the first `within` results.
func checkRanking(t *testing.T, s *Store, within int) {
	t.Helper()
	for _, q := range rankingQueries {
		res, err := s.Search(t.Context(), Query{Text: q.query, K: 3})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for i, r := range res.Results {
			found = found || (i < within && r.Title == q.want)
		}
		if !found {
			var got []string
			for _, r := range res.Results {
				got = append(got, r.Title)
			}
			t.Errorf("Search(%q) = %q, want %q in the first %d", q.query, got, q.want, within)
		}
	}
}

func TestSearchRanksSections(t *testing.T) {
	srv, hits := docsServer(t)
	s := openStore(t, nil)
	st, err := s.FetchDocs(t.Context(), srv.Client(), "@acme/sdk", srv.URL+"/sdk.md")
	if err != nil {
		t.Fatal(err)
	}
	if st.Added != 12 || st.Unchanged != 0 || hits.Load() != 1 {
		t.Errorf("first index = %+v after %d fetches, want 12 added", st, hits.Load())
	}
	checkRanking(t, s, 1)
	res, err := s.Search(t.Context(), Query{Text: "install"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "bm25" || !strings.Contains(res.Note, "BM25") {
		t.Errorf("mode = %q, note = %q; want bm25 and a note", res.Mode, res.Note)
	}
	r := res.Results[0]
	if r.Package != "@acme/sdk" || r.Source != srv.URL+"/sdk.md" || r.Title != "Installation" || r.Score <= 0 ||
		!strings.Contains(r.Content, "npm install @acme/sdk") {
		t.Errorf("first result = %+v", r)
	}

	// Unchanged chunks are skipped; a changed section replaces its old chunk.
	st, err = s.FetchDocs(t.Context(), srv.Client(), "@acme/sdk", srv.URL+"/sdk.md")
	if err != nil || st != (IndexStats{Unchanged: 12}) {
		t.Errorf("re-index = %+v, %v; want 12 unchanged", st, err)
	}
	md, _ := os.ReadFile("testdata/sdk.md")
	changed := strings.Replace(string(md), "1,500 requests per hour", "3,000 requests per hour", 1)
	st, err = s.IndexDocs(t.Context(), "@acme/sdk", srv.URL+"/sdk.md", changed)
	if err != nil || st != (IndexStats{Added: 1, Unchanged: 11, Removed: 1}) {
		t.Errorf("index after an edit = %+v, %v", st, err)
	}
	res, _ = s.Search(t.Context(), Query{Text: "requests per hour", K: 1})
	if len(res.Results) != 1 || !strings.Contains(res.Results[0].Content, "3,000") {
		t.Errorf("after edit: %+v", res.Results)
	}

	// A package filter keeps other packages out.
	if _, err := s.IndexDocs(t.Context(), "other", "mem://other", "## Installation\ninstall other\n"); err != nil {
		t.Fatal(err)
	}
	res, _ = s.Search(t.Context(), Query{Text: "install", Package: "other"})
	if len(res.Results) != 1 || res.Results[0].Package != "other" {
		t.Errorf("package filter: %+v", res.Results)
	}
	if _, err := s.FetchDocs(t.Context(), srv.Client(), "x", srv.URL+"/missing.md"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("fetch of a missing doc = %v, want a 404 error", err)
	}
}

func TestModulesLiveWithTheirVolume(t *testing.T) {
	s := openStore(t, nil)
	ctx := t.Context()
	if _, err := s.IndexDocs(ctx, "@acme/sdk", "mem://sdk", "## Teams\nlist teams\n"); err != nil {
		t.Fatal(err)
	}
	mod := Module{Path: "lib/triage.ts", Description: "Triage helper that labels stale tickets",
		Exports: []string{"triageStale"}, Usage: "await triageStale(client)"}
	if err := s.SaveModules(ctx, "vol-a", []Module{mod}); err == nil {
		t.Error("SaveModules on an unregistered volume succeeded")
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.TouchVolume(ctx, "vol-a", "sess-a", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchVolume(ctx, "vol-a", "sess-a", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	vols, _ := s.Volumes(ctx)
	if len(vols) != 1 || !vols[0].Created.Equal(t0) || !vols[0].LastAccessed.Equal(t0.Add(time.Minute)) {
		t.Errorf("volumes = %+v", vols)
	}
	if err := s.SaveModules(ctx, "vol-a", []Module{mod, mod}); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Modules(ctx, "vol-a"); len(ms) != 1 || ms[0].Exports[0] != "triageStale" {
		t.Errorf("modules = %+v, want the one module once", ms)
	}
	res, err := s.Search(ctx, Query{Text: "stale tickets", Volume: "vol-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) == 0 || res.Results[0].Source != "lib/triage.ts" || res.Results[0].Package != ModulePackage {
		t.Errorf("search with the live volume = %+v", res.Results)
	}
	// Another session does not see it.
	res, _ = s.Search(ctx, Query{Text: "stale tickets", Volume: "vol-b"})
	if len(res.Results) != 0 {
		t.Errorf("search from another volume = %+v", res.Results)
	}
	if err := s.DeleteVolume(ctx, "vol-a"); err != nil {
		t.Fatal(err)
	}
	res, _ = s.Search(ctx, Query{Text: "stale tickets", Volume: "vol-a"})
	if len(res.Results) != 0 {
		t.Errorf("search after the volume is gone = %+v", res.Results)
	}
	var n int
	s.db.QueryRow(`SELECT count(*) FROM code_modules_fts`).Scan(&n)
	if n != 0 {
		t.Errorf("%d full-text rows of deleted modules remain", n)
	}
}

// embeddingServer is an OpenAI-compatible /v1/embeddings over loopback whose vectors are
// hashed bags of stemmed-ish words: texts sharing words are close.
func embeddingServer(t testing.TB, calls *atomic.Int32) *httptest.Server {
	const dim = 64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "m" {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var data []item
		for i, in := range req.Input {
			v := make([]float32, dim)
			for _, word := range strings.FieldsFunc(strings.ToLower(in), func(r rune) bool { return !unicode.IsLetter(r) }) {
				if len(word) > 5 {
					word = word[:5]
				}
				h := sha256.Sum256([]byte(word))
				v[binary.LittleEndian.Uint32(h[:])%dim]++
			}
			data = append(data, item{Index: i, Embedding: v})
		}
		// Answer out of order: the client must use "index".
		for i, j := 0, len(data)-1; i < j; i, j = i+1, j-1 {
			data[i], data[j] = data[j], data[i]
		}
		json.NewEncoder(w).Encode(map[string]any{"data": data})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHybridSearch(t *testing.T) {
	var calls atomic.Int32
	emb := embeddingServer(t, &calls)
	srv, _ := docsServer(t)
	s := openStore(t, &Embedder{URL: emb.URL, Model: "m", Key: "k", Client: emb.Client()})
	if _, err := s.FetchDocs(t.Context(), srv.Client(), "@acme/sdk", srv.URL+"/sdk.md"); err != nil {
		t.Fatal(err)
	}
	var withVec int
	s.db.QueryRow(`SELECT count(*) FROM doc_chunks WHERE length(embedding) = 256`).Scan(&withVec)
	if withVec != 12 {
		t.Errorf("%d chunks have a 64-dim F32 embedding, want 12", withVec)
	}
	res, err := s.Search(t.Context(), Query{Text: "install"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "hybrid" || res.Note != "" {
		t.Errorf("mode = %q note = %q, want hybrid", res.Mode, res.Note)
	}
	// The test's bag-of-words embeddings are a weak model: hybrid keeps the right
	// section in the top 3.
	checkRanking(t, s, 3)
	// vector_distance_cos is plain SQL: identical vectors are 0 apart, orthogonal 1.
	var same, orth float64
	a, b := F32Blob([]float32{1, 0}), F32Blob([]float32{0, 2})
	if err := s.db.QueryRow(`SELECT vector_distance_cos(?, ?), vector_distance_cos(?, ?)`, a, a, a, b).Scan(&same, &orth); err != nil {
		t.Fatal(err)
	}
	if math.Abs(same) > 1e-9 || math.Abs(orth-1) > 1e-9 {
		t.Errorf("vector_distance_cos = %v, %v; want 0, 1", same, orth)
	}
	if err := s.db.QueryRow(`SELECT vector_distance_cos(?, ?)`, a, F32Blob([]float32{1})).Scan(&same); err == nil {
		t.Error("vector_distance_cos of different dimensions succeeded")
	}
	// A failing endpoint is an error, not a silent BM25 fallback.
	bad := openStore(t, &Embedder{URL: emb.URL, Model: "m", Key: "wrong", Client: emb.Client()})
	if _, err := bad.IndexDocs(t.Context(), "p", "s", "## A\na\n"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("index with a refused key = %v", err)
	}
}

func TestFTSQuery(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"install sdk", `"install" OR "sdk"`},
		{`a"b OR NEAR(c)`, `"a" OR "b" OR "OR" OR "NEAR" OR "c"`},
		{"   ---  ", ""},
		{"Ünïcode 42", `"Ünïcode" OR "42"`},
	}
	for _, tt := range tests {
		if got := ftsQuery(tt.in); got != tt.want {
			t.Errorf("ftsQuery(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzSearchQuery(f *testing.F) {
	s := openStore(f, nil)
	if _, err := s.IndexDocs(context.Background(), "p", "s", "## Install\nnpm install\n"); err != nil {
		f.Fatal(err)
	}
	f.Add("install")
	f.Add(`"unbalanced`)
	f.Add("NEAR(a b) AND -c*")
	f.Fuzz(func(t *testing.T, q string) {
		if _, err := s.Search(context.Background(), Query{Text: q}); err != nil {
			t.Fatalf("Search(%q): %v", q, err)
		}
	})
}

// BenchmarkSearch10k searches 10,000 chunks (BM25 only) made of a 5,000-word
// vocabulary with a Zipf distribution, like prose; it reports the p50 latency.
func BenchmarkSearch10k(b *testing.B) { benchSearch(b, openStore(b, nil), 10000) }

// benchSearch indexes n Zipf-worded chunks into s and reports the p50 latency of
// three-word searches over them.
func benchSearch(b *testing.B, s *Store, n int) {
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(r, 1.1, 1, 4999)
	word := func(n uint64) string { return fmt.Sprintf("w%dx", n) }
	var md strings.Builder
	for i := range n {
		fmt.Fprintf(&md, "## Section %d %s %s\n", i, word(zipf.Uint64()), word(zipf.Uint64()))
		for range 120 {
			md.WriteString(word(zipf.Uint64()) + " ")
		}
		md.WriteString("\n")
	}
	if st, err := s.IndexDocs(context.Background(), "bench", "mem://bench", md.String()); err != nil || st.Added != n {
		b.Fatalf("index = %+v, %v", st, err)
	}
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		q := word(zipf.Uint64()) + " " + word(zipf.Uint64()) + " " + word(zipf.Uint64())
		start := time.Now()
		if _, err := s.Search(context.Background(), Query{Text: q}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

// Words in more than half of the chunks leave the query (their BM25 weight is nearly
// zero); the ranking stays, and a query of only common words keeps its rarest.
func TestSelectiveQuery(t *testing.T) {
	s := openStore(t, nil)
	var md strings.Builder
	for i := range 200 {
		fmt.Fprintf(&md, "## Section %d\nthe client does things", i)
		if i%3 == 0 {
			md.WriteString(" and also more")
		}
		if i == 42 {
			md.WriteString(" with a webhook")
		}
		md.WriteString("\n")
	}
	if _, err := s.IndexDocs(t.Context(), "p", "mem://p", md.String()); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ text, want string }{
		{"the webhook", `"webhook"`},
		{"the client", `"the"`}, // all common, equally: the first stays
		{"the also", `"also"`},
		{"webhook", `"webhook"`},
	}
	for _, tt := range tests {
		got, err := s.selectiveQuery(t.Context(), tt.text)
		if err != nil || got != tt.want {
			t.Errorf("selectiveQuery(%q) = %q, %v; want %q", tt.text, got, err, tt.want)
		}
	}
	res, err := s.Search(t.Context(), Query{Text: "how does the client handle a webhook", K: 1})
	if err != nil || len(res.Results) != 1 || res.Results[0].Title != "Section 42" {
		t.Errorf("Search = %+v, %v; want Section 42", res.Results, err)
	}
}
