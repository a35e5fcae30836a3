package docsearch

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana"
	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana/hranatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// libsqlWasm is the npm package of libSQL's WebAssembly build the tests run.
const libsqlWasm = "@libsql/libsql-wasm-experimental@0.0.3"

// libsqlServer starts testdata/hrana-libsql.mjs, ended (by process group) when the
// test ends, and returns its URL.
func libsqlServer(t testing.TB, token string) string {
	t.Helper()
	testutil.NeedCommand(t, "node", "the libSQL server the tests run")
	mod := installLibSQLWasm(t)
	cmd := exec.Command("node", "testdata/hrana-libsql.mjs")
	cmd.Env = append(os.Environ(), "LIBSQL_WASM="+mod, "HRANA_TOKEN="+token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		url, ok := strings.CutPrefix(strings.TrimSpace(l), "listening ")
		if !ok {
			t.Fatalf("hrana-libsql.mjs said %q; stderr:\n%s", l, stderr.String())
		}
		return url
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("hrana-libsql.mjs did not start in 60 s; stderr:\n%s", stderr.String())
	}
	return ""
}

// installLibSQLWasm installs libsqlWasm with npm into a cache dir kept between runs
// and returns the path of its node.mjs.
func installLibSQLWasm(t testing.TB) string {
	t.Helper()
	return testutil.NPMPackages(t, "libsql-wasm", "node_modules/@libsql/libsql-wasm-experimental/node.mjs", libsqlWasm)
}

// remoteDB is the libSQL database the tests' stores open while a suite runs there.
type remoteDB struct {
	url, token string
	// native says whether the server has libSQL's vector index (a real libSQL).
	native bool
}

// remote is set while runSuite runs; the tests do not run in parallel.
var remote *remoteDB

// reset drops the store's tables, so each test starts on an empty database as it does
// on a new SQLite file.
func (r *remoteDB) reset(t testing.TB) {
	t.Helper()
	c, err := hrana.New(hrana.Options{URL: r.url, Token: r.token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var drops []hrana.Stmt
	for _, table := range []string{vecTable, "doc_chunks_fts", "doc_chunks", "code_modules_fts", "code_modules", "session_volumes", "doc_validators"} {
		drops = append(drops, hrana.Stmt{SQL: "DROP TABLE IF EXISTS " + table})
	}
	if _, err := c.Batch(t.Context(), drops); err != nil {
		t.Fatalf("empty the libSQL database: %v", err)
	}
}

// suite is the package's tests that run against a store.
var suite = []struct {
	name string
	f    func(*testing.T)
}{
	{"SearchRanksSections", TestSearchRanksSections},
	{"ModulesLiveWithTheirVolume", TestModulesLiveWithTheirVolume},
	{"HybridSearch", TestHybridSearch},
	{"SelectiveQuery", TestSelectiveQuery},
	{"VectorIndex", testVectorIndex},
	{"ConfiguredPackagesOnly", TestConfiguredPackagesOnly},
	{"ModuleRanksFromTheFirst", TestModuleRanksFromTheFirst},
	{"ConditionalFetch", TestConditionalFetch},
}

func runSuite(t *testing.T, r *remoteDB) {
	remote = r
	defer func() { remote = nil }()
	for _, tc := range suite {
		t.Run(tc.name, tc.f)
	}
}

// TestSuiteOnLibSQLServer runs the store's tests on a libSQL server or Turso
// database: LIBSQL_URL (libsql://…, https://… or http://127.0.0.1:8080 for a local
// sqld) and LIBSQL_AUTH_TOKEN. The database must be a scratch one: the tests drop and
// recreate the store's tables. Skipped without LIBSQL_URL.
func TestSuiteOnLibSQLServer(t *testing.T) {
	url := os.Getenv("LIBSQL_URL")
	if url == "" {
		t.Skip("LIBSQL_URL is not set (a scratch libSQL or Turso database; LIBSQL_AUTH_TOKEN its token)")
	}
	r := &remoteDB{url: url, token: os.Getenv("LIBSQL_AUTH_TOKEN"), native: true}
	runSuite(t, r)
	r.reset(t)
}

// TestSuiteOnLibSQL runs the store's tests on libSQL itself, with its native vector
// index: libSQL's WebAssembly build (npm @libsql/libsql-wasm-experimental) behind a
// Hrana server in Node (testdata/hrana-libsql.mjs) on loopback. npm installs it into
// the user cache dir once. Skipped without node and npm, except in CI.
func TestSuiteOnLibSQL(t *testing.T) {
	runSuite(t, &remoteDB{url: libsqlServer(t, "wasm-token"), token: "wasm-token", native: true})
}

// TestSuiteOverHrana runs the store's tests through the Hrana client against a Hrana
// server on loopback backed by SQLite (hranatest): the same SQL as on the file, over
// the wire, with batons and transactions; without libSQL's vector functions, so vector
// search takes the cosine scan.
func TestSuiteOverHrana(t *testing.T) {
	registerFunctions() // the server's SQLite has our vector_distance_cos
	hs, err := hranatest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hs.Token = "test-token"
	srv := httptest.NewServer(hs)
	defer func() { srv.Close(); hs.Close() }()
	runSuite(t, &remoteDB{url: srv.URL, token: "test-token"})
	if n := hs.Streams(); n != 0 {
		t.Errorf("%d streams left open on the server", n)
	}
}

// testVectorIndex: on libSQL, embeddings of doc chunks go into the native vector index
// (vector_top_k) once the first one's dimension is known, and it ranks as the scan
// does; elsewhere the store stays on the scan. Either way search is hybrid.
func testVectorIndex(t *testing.T) {
	var calls atomic.Int32
	emb := embeddingServer(t, &calls)
	s := openStore(t, &Embedder{URL: emb.URL, Model: "m", Key: "k", Client: emb.Client()})
	if s.NativeVectorIndex() {
		t.Fatal("a new store has a vector index before any embedding")
	}
	md, err := os.ReadFile("testdata/sdk.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexDocs(t.Context(), "@acme/sdk", "mem://sdk", string(md)); err != nil {
		t.Fatal(err)
	}
	wantNative := remote != nil && remote.native
	if got := s.NativeVectorIndex(); got != wantNative {
		t.Fatalf("NativeVectorIndex = %v, want %v", got, wantNative)
	}
	if remote != nil {
		// A store opened later on the same database finds the index, or its absence.
		again, err := Open(t.Context(), Options{URL: remote.url, Token: remote.token})
		if err != nil {
			t.Fatal(err)
		}
		if got := again.NativeVectorIndex(); got != wantNative {
			t.Errorf("NativeVectorIndex of a reopened store = %v, want %v", got, wantNative)
		}
		again.Close()
	}
	if wantNative {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM ` + vecTable).Scan(&n); err != nil || n != 12 {
			t.Errorf("%d rows in the vector index, %v; want 12", n, err)
		}
		// The index's nearest neighbours of a chunk's own embedding start with it.
		var title string
		err := s.db.QueryRow(`SELECT d.title FROM vector_top_k('` + vecIndexName + `', (SELECT embedding FROM doc_chunks WHERE title = 'Webhooks'), 1) v
			JOIN doc_chunks d ON d.id = v.id`).Scan(&title)
		if err != nil || title != "Webhooks" {
			t.Errorf("vector_top_k of the Webhooks chunk = %q, %v", title, err)
		}
	}
	res, err := s.Search(t.Context(), Query{Text: "verify the signature of an event delivery", K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "hybrid" || len(res.Results) == 0 {
		t.Fatalf("Search = %+v", res)
	}
	found := false
	for _, r := range res.Results {
		found = found || r.Title == "Webhooks"
	}
	if !found {
		t.Errorf("Webhooks not in the top 3: %+v", res.Results)
	}
	// A re-index that drops a section drops it from the vector index too.
	cut := strings.Replace(string(md), "## Webhooks", "## Hooks", 1)
	if _, err := s.IndexDocs(t.Context(), "@acme/sdk", "mem://sdk", cut); err != nil {
		t.Fatal(err)
	}
	if wantNative {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM ` + vecTable + ` WHERE id NOT IN (SELECT id FROM doc_chunks)`).Scan(&n); err != nil || n != 0 {
			t.Errorf("%d vector rows of removed chunks, %v", n, err)
		}
	}
}

// BenchmarkSearchOverHrana is BenchmarkSearch10k's search over 2,000 chunks through
// the Hrana client and a Hrana server on loopback (hranatest, SQLite behind it): the
// client's own cost per search, without a network's latency. It reports the p50.
func BenchmarkSearchOverHrana(b *testing.B) {
	registerFunctions()
	hs, err := hranatest.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(hs)
	defer func() { srv.Close(); hs.Close() }()
	remote = &remoteDB{url: srv.URL}
	defer func() { remote = nil }()
	benchSearch(b, openStore(b, nil), 2000)
}

// On libSQL an index's writes go as batches of at most maxPlanBatchBytes, each one
// request: a 5 MB document (10 MB of statements: the text goes to the table and to its
// full-text index) is a query and three transactions, not a request per row.
func TestIndexWritesInBatches(t *testing.T) {
	registerFunctions()
	hs, err := hranatest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hs)
	defer func() { srv.Close(); hs.Close() }()
	s, err := Open(t.Context(), Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var md strings.Builder
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 600) // ~16 KB
	for i := range 320 {
		fmt.Fprintf(&md, "## Section %d\nsection%d %s\n", i, i, filler)
	}
	before := hs.Requests()
	st, err := s.IndexDocs(t.Context(), "p", "mem://big", md.String())
	if err != nil || st.Added != 320 {
		t.Fatalf("IndexDocs = %+v, %v", st, err)
	}
	if n := hs.Requests() - before; n != 4 {
		t.Errorf("indexing 5 MB took %d requests, want 4 (read the hashes, three batches)", n)
	}
	var rows, fts int
	if err := s.db.QueryRow(`SELECT (SELECT count(*) FROM doc_chunks), (SELECT count(*) FROM doc_chunks_fts)`).Scan(&rows, &fts); err != nil || rows != 320 || fts != 320 {
		t.Errorf("%d chunks and %d full-text rows, %v; want 320 each", rows, fts, err)
	}
	res, err := s.Search(t.Context(), Query{Text: "section317", K: 1})
	if err != nil || len(res.Results) != 1 || res.Results[0].Title != "Section 317" {
		t.Errorf("Search = %+v, %v", res.Results, err)
	}
	// A batch that fails midway leaves nothing behind: its stream closes with the
	// transaction open, which rolls it back.
	if _, err := s.db.Exec(`DROP TABLE doc_chunks_fts`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexDocs(t.Context(), "p", "mem://other", "## A\na\n## B\nb\n"); err == nil || !strings.Contains(err.Error(), "doc_chunks_fts") {
		t.Errorf("IndexDocs without the FTS table = %v", err)
	}
	if err := s.db.QueryRow(`SELECT count(*) FROM doc_chunks WHERE source = 'mem://other'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("%d chunks of a failed batch were kept, %v", rows, err)
	}
	if n := hs.Streams(); n != 0 {
		t.Errorf("%d streams left open", n)
	}
}

// BenchmarkVectorOnLibSQL compares libSQL's native vector index (vector_top_k) with the
// vector_distance_cos scan for the vector half of a hybrid search, over 3,000 chunks
// with 64-dimension embeddings on libSQL's WebAssembly build behind Hrana on loopback.
// It reports the p50 of one vector ranking (top 50).
func BenchmarkVectorOnLibSQL(b *testing.B) {
	var calls atomic.Int32
	emb := embeddingServer(b, &calls)
	remote = &remoteDB{url: libsqlServer(b, ""), native: true}
	defer func() { remote = nil }()
	s := openStore(b, &Embedder{URL: emb.URL, Model: "m", Key: "k", Client: emb.Client()})
	r := rand.New(rand.NewPCG(3, 4))
	var md strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&md, "## Section %d\n", i)
		for range 40 {
			fmt.Fprintf(&md, "word%d ", r.IntN(400))
		}
		md.WriteString("\n")
	}
	if st, err := s.IndexDocs(b.Context(), "bench", "mem://bench", md.String()); err != nil || st.Added != 3000 {
		b.Fatalf("index = %+v, %v", st, err)
	}
	if !s.NativeVectorIndex() {
		b.Fatal("no native vector index")
	}
	vs, err := s.emb.Embed(b.Context(), []string{"word1 word2 word3 word4"})
	if err != nil {
		b.Fatal(err)
	}
	blob := F32Blob(vs[0])
	for _, native := range []bool{true, false} {
		name := map[bool]string{true: "vector_top_k", false: "scan"}[native]
		b.Run(name, func(b *testing.B) {
			dim := s.vec.dim
			if !native {
				s.vec.dim = 0
			}
			defer func() { s.vec.dim = dim }()
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := s.vector(b.Context(), Query{}, false, blob, 50); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
