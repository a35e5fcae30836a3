// Package docsearch is the search index behind the code-execution tools of
// provider/coderun: SDK documentation fetched as markdown and chunked by `## ` headings
// (doc_chunks), the code modules a model saved in a session's volume (code_modules), and
// the registry of those volumes (session_volumes).
//
// The store is one SQLite file opened with a pure-Go driver (modernc.org/sqlite, so CGO
// stays off), or, when a URL is configured, a libSQL server or Turso database reached
// over Hrana over HTTP (package hrana) with the same schema and SQL; there, doc chunks'
// embeddings also go into libSQL's native vector index (see remote.go). Keyword
// ranking is FTS5's BM25 with the porter stemmer ("install" finds "Installation").
// When an OpenAI-compatible embeddings endpoint is configured, every chunk and module
// also gets an F32 embedding blob, compared by cosine through the SQL function
// vector_distance_cos (libSQL's name, so the SQL is the same there), and search is
// hybrid: BM25 and vector rankings merged by reciprocal rank. Without an endpoint,
// search is BM25 only and its result says so.
//
// provider/coderun imports it; nothing here knows about sandboxes.
package docsearch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana"
)

// schema creates the three tables and their full-text indexes, one statement each
// (Hrana runs one statement per request). The FTS tables are kept by hand (same rowid
// as their table) in the transactions that change a row. The same statements run on
// SQLite and on libSQL.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS doc_chunks (
	id        INTEGER PRIMARY KEY,
	package   TEXT NOT NULL,
	source    TEXT NOT NULL,
	title     TEXT NOT NULL,
	content   TEXT NOT NULL,
	hash      TEXT NOT NULL,
	embedding BLOB,
	UNIQUE (package, source, hash)
)`,
	`CREATE VIRTUAL TABLE IF NOT EXISTS doc_chunks_fts USING fts5(title, content, tokenize = 'porter unicode61')`,
	`CREATE TABLE IF NOT EXISTS session_volumes (
	name             TEXT PRIMARY KEY,
	session          TEXT NOT NULL,
	created_at       INTEGER NOT NULL,
	last_accessed_at INTEGER NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS code_modules (
	id          INTEGER PRIMARY KEY,
	volume      TEXT NOT NULL REFERENCES session_volumes(name) ON DELETE CASCADE,
	path        TEXT NOT NULL,
	description TEXT NOT NULL,
	exports     TEXT NOT NULL,
	usage       TEXT NOT NULL,
	embedding   BLOB,
	UNIQUE (volume, path)
)`,
	`CREATE VIRTUAL TABLE IF NOT EXISTS code_modules_fts USING fts5(title, content, tokenize = 'porter unicode61')`,
	// The HTTP validators of fetched documents, for conditional fetches.
	`CREATE TABLE IF NOT EXISTS doc_validators (
	package       TEXT NOT NULL,
	source        TEXT NOT NULL,
	etag          TEXT NOT NULL,
	last_modified TEXT NOT NULL,
	PRIMARY KEY (package, source)
)`,
}

// Options configure a Store.
type Options struct {
	// Path is the SQLite file; its directory is created. Required unless URL is set.
	Path string
	// URL, when set, is a libSQL server or Turso database (libsql://host, https://…
	// or http://…) used instead of the file at Path; see hrana.ParseURL.
	URL string
	// Token is URL's auth token (empty for a server without auth). Never logged.
	Token string
	// HTTPClient, when set, carries the libSQL requests.
	HTTPClient *http.Client
	// Embedder, when set, makes search hybrid (BM25 + vector); nil means BM25 only.
	Embedder *Embedder
}

// Store is the index. Its methods are safe for concurrent use.
type Store struct {
	db  *sql.DB
	emb *Embedder
	// remote is the libSQL client when the store is on a server, else nil.
	remote *hrana.Client
	vec    vecIndex
}

var registerOnce sync.Once

// registerFunctions adds vector_distance_cos to every connection the driver opens.
func registerFunctions() {
	registerOnce.Do(func() {
		sqlite.MustRegisterDeterministicScalarFunction("vector_distance_cos", 2, vectorDistanceCos)
	})
}

// Open opens (or creates) the store: the SQLite file at Path, or the libSQL database
// at URL.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.URL != "" {
		return openRemote(ctx, o)
	}
	if o.Path == "" {
		return nil, errors.New("open docsearch: Path or URL is required")
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o700); err != nil {
		return nil, fmt.Errorf("open docsearch: %w", err)
	}
	registerFunctions()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	// Every transaction writes: take the write lock at BEGIN, where busy_timeout
	// waits for it. A deferred one that reads first and another connection (the
	// background cleanup, another process) commits in between fails at its first
	// write with SQLITE_BUSY_SNAPSHOT, which no timeout helps.
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+o.Path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open docsearch: %w", err)
	}
	db.SetConnMaxIdleTime(time.Minute)
	if _, err := db.ExecContext(ctx, strings.Join(schema, ";\n")); err != nil {
		db.Close()
		return nil, fmt.Errorf("open docsearch %s: %w", o.Path, err)
	}
	return &Store{db: db, emb: o.Embedder}, nil
}

// Close closes the database (and a libSQL store's idle connections).
func (s *Store) Close() error {
	err := s.db.Close()
	if s.remote != nil {
		s.remote.Close()
	}
	return err
}

// Hybrid reports whether search uses embeddings.
func (s *Store) Hybrid() bool { return s.emb != nil }

// inTx runs f in a transaction, committed when f returns nil.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
