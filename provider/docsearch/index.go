package docsearch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana"
)

// IndexStats say what an IndexDocs did.
type IndexStats struct {
	Added     int `json:"added"`
	Unchanged int `json:"unchanged"`
	Removed   int `json:"removed"`
	// NotModified: the server answered 304 to a conditional fetch.
	NotModified bool `json:"notModified,omitempty"`
}

// IndexDocs indexes one markdown document of a package: chunks whose hash is already
// stored for (pkg, source) are kept as they are, new ones are added (and embedded when
// the store has an Embedder), and chunks no longer in the document are removed.
func (s *Store) IndexDocs(ctx context.Context, pkg, source, md string) (IndexStats, error) {
	return s.IndexChunks(ctx, pkg, source, ChunkMarkdown(md))
}

// IndexChunks indexes the chunks of one document of a package, as IndexDocs does.
func (s *Store) IndexChunks(ctx context.Context, pkg, source string, chunks []Chunk) (IndexStats, error) {
	var st IndexStats
	want := map[string]Chunk{}
	var order []string
	for _, c := range chunks {
		h := c.Hash()
		if _, dup := want[h]; !dup {
			order = append(order, h)
		}
		want[h] = c
	}
	have := map[string]int64{}
	rows, err := s.db.QueryContext(ctx, `SELECT id, hash FROM doc_chunks WHERE package = ? AND source = ?`, pkg, source)
	if err != nil {
		return st, fmt.Errorf("index %s: %w", source, err)
	}
	for rows.Next() {
		var id int64
		var h string
		if err := rows.Scan(&id, &h); err != nil {
			rows.Close()
			return st, fmt.Errorf("index %s: %w", source, err)
		}
		have[h] = id
	}
	rows.Close()
	var add []Chunk
	for _, h := range order {
		if _, ok := have[h]; ok {
			st.Unchanged++
			continue
		}
		add = append(add, want[h])
	}
	var vecs [][]float32
	if s.emb != nil && len(add) > 0 {
		texts := make([]string, len(add))
		for i, c := range add {
			texts[i] = c.Title + "\n" + c.Content
		}
		if vecs, err = s.emb.Embed(ctx, texts); err != nil {
			return st, fmt.Errorf("index %s: %w", source, err)
		}
	}
	if len(vecs) > 0 {
		s.ensureVecIndex(ctx, len(vecs[0]))
	}
	// The writes name rows by last_insert_rowid() or their unique key, not by ids read
	// back, so they are a plan: one transaction on SQLite, one batch per few MiB on
	// libSQL.
	var plan []stmt
	for h, id := range have {
		if _, keep := want[h]; keep {
			continue
		}
		plan = append(plan, deleteStmts("doc_chunks", id)...)
		plan = append(plan, s.deleteVecStmts(id)...)
		st.Removed++
	}
	const byKey = ` FROM doc_chunks WHERE package = ? AND source = ? AND hash = ?`
	for i, c := range add {
		var blob []byte
		if vecs != nil {
			blob = F32Blob(vecs[i])
		}
		h := c.Hash()
		plan = append(plan,
			stmt{`INSERT INTO doc_chunks (package, source, title, content, hash, embedding) VALUES (?, ?, ?, ?, ?, ?)`,
				[]any{pkg, source, c.Title, c.Content, h, blob}},
			// Right after the insert, last_insert_rowid() is the chunk's id.
			stmt{`INSERT INTO doc_chunks_fts (rowid, title, content) VALUES (last_insert_rowid(), ?, ?)`, []any{c.Title, c.Content}})
		if s.vecFits(blob) {
			plan = append(plan, stmt{`INSERT OR REPLACE INTO ` + vecTable + ` (id, embedding) SELECT id, vector32(embedding)` + byKey,
				[]any{pkg, source, h}})
		}
		st.Added++
	}
	if err := s.writePlan(ctx, plan); err != nil {
		return IndexStats{}, fmt.Errorf("index %s: %w", source, err)
	}
	return st, nil
}

// stmt is one statement of a write plan.
type stmt struct {
	sql  string
	args []any
}

// deleteStmts delete a row of doc_chunks or code_modules and its full-text entry.
func deleteStmts(table string, id int64) []stmt {
	return []stmt{
		{`DELETE FROM ` + table + `_fts WHERE rowid = ?`, []any{id}},
		{`DELETE FROM ` + table + ` WHERE id = ?`, []any{id}},
	}
}

// maxPlanBatchBytes bounds one libSQL batch of a write plan (its statements' text and
// arguments): a big document is several transactions rather than one huge request.
// Re-indexing converges if one fails midway: chunks already written count as
// unchanged, the rest are added.
const maxPlanBatchBytes = 4 << 20

// writePlan runs the statements in order, in one transaction on SQLite and in
// transactions of at most maxPlanBatchBytes on libSQL, each one request (BEGIN, the
// statements, COMMIT; a failed step skips the rest, and closing the stream rolls back).
func (s *Store) writePlan(ctx context.Context, plan []stmt) error {
	if len(plan) == 0 {
		return nil
	}
	if s.remote == nil {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			for _, st := range plan {
				if _, err := tx.ExecContext(ctx, st.sql, st.args...); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for len(plan) > 0 {
		batch := []hrana.Stmt{{SQL: "BEGIN"}}
		size := 0
		for len(plan) > 0 && (len(batch) == 1 || size+stmtSize(plan[0]) <= maxPlanBatchBytes) {
			size += stmtSize(plan[0])
			batch = append(batch, hrana.Stmt{SQL: plan[0].sql, Args: plan[0].args})
			plan = plan[1:]
		}
		batch = append(batch, hrana.Stmt{SQL: "COMMIT"})
		if _, err := s.remote.Batch(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// stmtSize estimates a statement's size on the wire (blobs grow by a third in base64).
func stmtSize(st stmt) int {
	n := len(st.sql) + 32
	for _, a := range st.args {
		switch x := a.(type) {
		case string:
			n += len(x) + 32
		case []byte:
			n += len(x)*4/3 + 32
		default:
			n += 32
		}
	}
	return n
}

// maxDocBytes caps one fetched document.
const maxDocBytes = 32 << 20

// FetchDocs fetches a markdown document with client (nil: http.DefaultClient) and
// indexes it with IndexDocs. The document's ETag and Last-Modified are kept, and the
// next fetch is conditional: a 304 leaves the index as it is (Unchanged counts the
// chunks it has).
func (s *Store) FetchDocs(ctx context.Context, client *http.Client, pkg, url string) (IndexStats, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return IndexStats{}, fmt.Errorf("fetch docs %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/markdown, text/plain;q=0.9, */*;q=0.1")
	var etag, modified string
	var chunks int
	err = s.db.QueryRowContext(ctx, `SELECT v.etag, v.last_modified, (SELECT count(*) FROM doc_chunks d WHERE d.package = v.package AND d.source = v.source)
		FROM doc_validators v WHERE v.package = ? AND v.source = ?`, pkg, url).Scan(&etag, &modified, &chunks)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return IndexStats{}, fmt.Errorf("fetch docs %s: %w", url, err)
	}
	if chunks > 0 {
		// Without chunks (the document was pruned) a 304 would leave nothing indexed.
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		if modified != "" {
			req.Header.Set("If-Modified-Since", modified)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return IndexStats{}, fmt.Errorf("fetch docs: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified && chunks > 0 {
		return IndexStats{Unchanged: chunks, NotModified: true}, nil
	}
	if resp.StatusCode != http.StatusOK {
		return IndexStats{}, fmt.Errorf("fetch docs %s: %s", url, resp.Status)
	}
	var b strings.Builder
	if _, err := io.Copy(&b, io.LimitReader(resp.Body, maxDocBytes)); err != nil {
		return IndexStats{}, fmt.Errorf("fetch docs %s: %w", url, err)
	}
	st, err := s.IndexDocs(ctx, pkg, url, b.String())
	if err != nil {
		return st, err
	}
	etag, modified = resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if _, err := s.db.ExecContext(ctx, `INSERT INTO doc_validators (package, source, etag, last_modified) VALUES (?, ?, ?, ?)
		ON CONFLICT (package, source) DO UPDATE SET etag = excluded.etag, last_modified = excluded.last_modified`,
		pkg, url, etag, modified); err != nil {
		return st, fmt.Errorf("fetch docs %s: %w", url, err)
	}
	return st, nil
}

// PruneDocs deletes the chunks of pkg's documents whose source starts with prefix
// but is not in keep: the documents of a package version no longer configured.
func (s *Store) PruneDocs(ctx context.Context, pkg, prefix string, keep []string) (int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, source FROM doc_chunks WHERE package = ? AND substr(source, 1, ?) = ?`, pkg, len(prefix), prefix)
	if err != nil {
		return 0, fmt.Errorf("prune docs of %s: %w", pkg, err)
	}
	var plan []stmt
	n := 0
	for rows.Next() {
		var id int64
		var src string
		if err := rows.Scan(&id, &src); err != nil {
			rows.Close()
			return 0, fmt.Errorf("prune docs of %s: %w", pkg, err)
		}
		if slices.Contains(keep, src) {
			continue
		}
		plan = append(plan, deleteStmts("doc_chunks", id)...)
		plan = append(plan, s.deleteVecStmts(id)...)
		n++
	}
	rows.Close()
	if err := s.writePlan(ctx, plan); err != nil {
		return 0, fmt.Errorf("prune docs of %s: %w", pkg, err)
	}
	return n, nil
}
