package docsearch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana"
)

// On libSQL, doc chunks' embeddings also go into a table of their own whose column
// has the vector type with its dimension, F32_BLOB(n), with libSQL's native vector
// index on it (libsql_vector_idx, queried with vector_top_k). The three tables stay as
// they are on SQLite, where an embedding's dimension is whatever the model gives; the
// vector table is kept by hand, like the FTS tables, and made when the first
// embedding arrives, since only then is the dimension known.
const (
	vecTable     = "doc_chunks_vec"
	vecIndexName = "doc_chunks_vec_idx"
)

// vecIndex is the state of the native vector index of a libSQL store.
type vecIndex struct {
	mu  sync.Mutex
	dim int // the index's dimension; 0 when there is none (yet)
	// off says why there is no index when the server refused to make one; the
	// cosine scan serves vector search then.
	off error
}

// f32Type matches the vector table's declared column type.
var f32Type = regexp.MustCompile(`(?i)F32_BLOB\s*\(\s*([0-9]+)\s*\)`)

// openRemote opens a store on a libSQL database and creates the schema there in one
// batch.
func openRemote(ctx context.Context, o Options) (*Store, error) {
	c, err := hrana.New(hrana.Options{URL: o.URL, Token: o.Token, HTTPClient: o.HTTPClient})
	if err != nil {
		return nil, fmt.Errorf("open docsearch: %w", err)
	}
	stmts := make([]hrana.Stmt, 0, len(schema)+1)
	for _, q := range schema {
		stmts = append(stmts, hrana.Stmt{SQL: q})
	}
	stmts = append(stmts, vecDDL)
	res, err := c.Batch(ctx, stmts)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("open docsearch on libsql: %w", err)
	}
	s := &Store{db: sql.OpenDB(c.Connector()), emb: o.Embedder, remote: c}
	s.db.SetMaxIdleConns(4)
	s.vec.dim = declaredDim(res[len(res)-1])
	return s, nil
}

// NativeVectorIndex reports whether vector search uses libSQL's vector index (a
// libSQL store whose index exists); otherwise it scans with vector_distance_cos.
func (s *Store) NativeVectorIndex() bool {
	s.vec.mu.Lock()
	defer s.vec.mu.Unlock()
	return s.remote != nil && s.vec.dim > 0
}

// vecDim is the native index's dimension, 0 when there is none.
func (s *Store) vecDim() int {
	s.vec.mu.Lock()
	defer s.vec.mu.Unlock()
	if s.remote == nil {
		return 0
	}
	return s.vec.dim
}

// ensureVecIndex makes the native vector index for embeddings of dim float32s on a
// libSQL store, once. A server that refuses it (no vector support) leaves the store on
// the cosine scan, which is not an error.
func (s *Store) ensureVecIndex(ctx context.Context, dim int) {
	if s.remote == nil || dim <= 0 {
		return
	}
	s.vec.mu.Lock()
	defer s.vec.mu.Unlock()
	if s.vec.dim != 0 || s.vec.off != nil {
		return
	}
	res, err := s.remote.Batch(ctx, []hrana.Stmt{
		{SQL: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (id INTEGER PRIMARY KEY, embedding F32_BLOB(%d) NOT NULL)`, vecTable, dim)},
		{SQL: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (libsql_vector_idx(embedding, 'metric=cosine'))`, vecIndexName, vecTable)},
		// Chunks embedded while the index could not be made join it now.
		{SQL: `INSERT OR IGNORE INTO ` + vecTable + ` (id, embedding) SELECT id, vector32(embedding) FROM doc_chunks WHERE length(embedding) = ?`, Args: []any{4 * dim}},
		vecDDL,
	})
	var se *hrana.Error
	switch {
	case errors.As(err, &se):
		// The server ran the statements and refused them: no vector index there.
		s.vec.off = err
	case err == nil:
		// Another process may have made the table first, with its own dimension.
		s.vec.dim = declaredDim(res[3])
	}
	// A transport failure says nothing about the server: the next embedding tries again.
}

// vecDDL reads the vector table's CREATE statement, when its index exists too (a
// server without vector indexes may have made the table and refused the index).
var vecDDL = hrana.Stmt{SQL: `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?
	AND EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?)`, Args: []any{vecTable, vecIndexName}}

// declaredDim is the dimension in the vector table's CREATE statement, 0 without one.
func declaredDim(r hrana.Result) int {
	if len(r.Rows) != 1 {
		return 0
	}
	ddl, _ := r.Rows[0][0].(string)
	m := f32Type.FindStringSubmatch(ddl)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0
	}
	return n
}

// vecFits reports whether an embedding goes into the native index: a libSQL store
// whose index has the embedding's dimension.
func (s *Store) vecFits(blob []byte) bool {
	d := s.vecDim()
	return d > 0 && len(blob) == 4*d
}

// deleteVecStmts remove a chunk from the native index, when there is one.
func (s *Store) deleteVecStmts(id int64) []stmt {
	if s.vecDim() == 0 {
		return nil
	}
	return []stmt{{`DELETE FROM ` + vecTable + ` WHERE id = ?`, []any{id}}}
}
