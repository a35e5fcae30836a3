package coderun

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana/hranatest"
)

// storage_url puts the index on a libSQL server: here a Hrana server on loopback
// (hranatest, SQLite behind Hrana over HTTP), with the token from the environment.
func TestStorageURL(t *testing.T) {
	hs, err := hranatest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hs.Token = "storage-tok-1"
	db := httptest.NewServer(hs)
	// Cleanups, not defers: the runner's sweep (a cleanup registered later, so run
	// earlier) still talks to the server.
	t.Cleanup(func() { db.Close(); hs.Close() })
	docs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# SDK\n## Installation\nnpm install the sdk\n## Webhooks\nverify signatures\n")
	}))
	t.Cleanup(docs.Close)

	cfg, err := Parse([]byte(`
[sandbox]
enabled = true
storage_url = "`+db.URL+`"
storage_token_env = "CODERUN_STORAGE_TOKEN"

[[sandbox.dependencies]]
package = "is-odd"
docs = ["`+docs.URL+`/sdk.md"]
`), env(map[string]string{"CODERUN_STORAGE_TOKEN": "storage-tok-1"}))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := newRunner(t, cfg, Options{HTTPClient: docs.Client(), ReapEvery: -1})
	if err := r.IndexDocs(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := hs.Requests()
	res, err := r.Search(context.Background(), "install", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 1 || res.Results[0].Title != "Installation" || res.Results[0].Package != "is-odd" {
		t.Errorf("Search = %+v", res.Results)
	}
	if hs.Requests() <= before {
		t.Error("the search sent no request to the libSQL server")
	}
	if !strings.HasPrefix(res.Results[0].Source, docs.URL) {
		t.Errorf("source = %q", res.Results[0].Source)
	}
}
