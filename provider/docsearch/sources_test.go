package docsearch

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A search with Packages returns only those packages' docs, and PruneDocs drops the
// documents of a package version no longer configured.
func TestConfiguredPackagesOnly(t *testing.T) {
	s := openStore(t, nil)
	ctx := t.Context()
	for _, d := range []struct{ pkg, src, md string }{
		{"ms", "npm:ms@2.1.3/readme.md", "# ms\nconvert time strings to milliseconds\n"},
		{"ms", "npm:ms@2.0.0/readme.md", "# ms\nconvert time strings, the old version\n"},
		{"gone", "npm:gone@1.0.0/README.md", "# gone\nconvert time strings too\n"},
	} {
		if _, err := s.IndexDocs(ctx, d.pkg, d.src, d.md); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Search(ctx, Query{Text: "convert time", Packages: []string{"ms"}, K: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Results {
		if r.Package != "ms" {
			t.Errorf("Search with Packages [ms] returned %s (%s)", r.Package, r.Source)
		}
	}
	if len(res.Results) != 2 {
		t.Errorf("Search with Packages [ms] = %d results, want 2", len(res.Results))
	}
	if n, err := s.PruneDocs(ctx, "ms", "npm:ms@", []string{"npm:ms@2.1.3/readme.md"}); err != nil || n != 1 {
		t.Errorf("PruneDocs = %d, %v; want the old version's one chunk", n, err)
	}
	res, _ = s.Search(ctx, Query{Text: "convert time", Packages: []string{"ms"}, K: 10})
	if len(res.Results) != 1 || res.Results[0].Source != "npm:ms@2.1.3/readme.md" {
		t.Errorf("after the prune = %+v, want the current version only", res.Results)
	}
	if res, _ := s.Search(ctx, Query{Text: "convert time", Packages: []string{}, K: 10}); len(res.Results) != 0 {
		t.Errorf("Search with no packages = %+v, want nothing", res.Results)
	}
}

// A single saved module ranks with the docs: the two indexes' scores are normalized
// before they merge (BM25 over a one-row table has an IDF of about 0).
func TestModuleRanksFromTheFirst(t *testing.T) {
	s := openStore(t, nil)
	ctx := t.Context()
	var md strings.Builder
	for i := range 40 {
		fmt.Fprintf(&md, "## Section %d\nissues and tickets of the tracker, part %d\n", i, i)
	}
	if _, err := s.IndexDocs(ctx, "tracker", "mem://tracker", md.String()); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchVolume(ctx, "vol-rank", "sess", time.Now()); err != nil {
		t.Fatal(err)
	}
	mod := Module{Path: "lib/stale.ts", Description: "Close stale tickets", Exports: []string{"closeStale"}}
	if err := s.SaveModules(ctx, "vol-rank", []Module{mod}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Search(ctx, Query{Text: "close stale tickets", Volume: "vol-rank", K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) == 0 || res.Results[0].Source != "lib/stale.ts" {
		t.Errorf("Search = %+v, want the module first", res.Results)
	}
	for _, r := range res.Results {
		if r.Score <= 0 || r.Score > 1 {
			t.Errorf("score %v of %s, want (0, 1]", r.Score, r.Source)
		}
	}
}

// A fetched document's ETag and Last-Modified make the next fetch conditional; a 304
// keeps the index; a changed document is indexed again.
func TestConditionalFetch(t *testing.T) {
	var hits, conditional atomic.Int32
	var body atomic.Value
	body.Store("# SDK\n## Install\nnpm install sdk\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b := body.Load().(string)
		etag := fmt.Sprintf(`"%d"`, len(b))
		if r.Header.Get("If-None-Match") != "" {
			conditional.Add(1)
			if r.Header.Get("If-None-Match") == etag && r.Header.Get("If-Modified-Since") == "Mon, 02 Jan 2006 15:04:05 GMT" {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		w.Header().Set("ETag", etag)
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		w.Write([]byte(b))
	}))
	t.Cleanup(srv.Close)
	s := openStore(t, nil)
	st, err := s.FetchDocs(t.Context(), srv.Client(), "sdk", srv.URL+"/sdk.md")
	if err != nil || st.Added != 2 || st.NotModified {
		t.Fatalf("first fetch = %+v, %v", st, err)
	}
	st, err = s.FetchDocs(t.Context(), srv.Client(), "sdk", srv.URL+"/sdk.md")
	if err != nil || !st.NotModified || st.Unchanged != 2 || conditional.Load() != 1 {
		t.Errorf("second fetch = %+v, %v (%d conditional requests); want 304 with the chunk kept", st, err, conditional.Load())
	}
	body.Store("# SDK\n## Install\nnpm install sdk\n## Usage\ncall it\n")
	st, err = s.FetchDocs(t.Context(), srv.Client(), "sdk", srv.URL+"/sdk.md")
	if err != nil || st.NotModified || st.Added != 1 || st.Unchanged != 2 {
		t.Errorf("fetch of the changed document = %+v, %v", st, err)
	}
	if hits.Load() != 3 {
		t.Errorf("%d requests, want 3", hits.Load())
	}
}
