// Package hranatest is a Hrana-over-HTTP server for tests: POST /v2/pipeline with
// execute, batch and close requests, answered by a real SQLite database
// (modernc.org/sqlite) per libSQL's HTTP_V2_SPEC.md and the shared structures of
// HRANA_3_SPEC.md. It stands in for a libSQL server in tests of code that talks to one
// (there is no sqld on test machines); it has SQLite's functions only, so no
// vector32, libsql_vector_idx or vector_top_k. Its types are its own, written from
// the spec, not the client's.
package hranatest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"

	_ "modernc.org/sqlite" // the database behind the server
)

// Server answers Hrana over HTTP from a SQLite file.
type Server struct {
	// Token, when set, is the bearer token requests must carry (else 401).
	Token string
	db    *sql.DB

	mu       sync.Mutex
	streams  map[string]*sql.Conn
	requests int
}

// Requests is how many pipeline requests the server answered or refused.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Streams is how many streams are open.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// New opens a SQLite database in dir.
func New(dir string) (*Server, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "hrana.db")+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	return &Server{db: db, streams: map[string]*sql.Conn{}}, nil
}

// Close closes every stream and the database.
func (s *Server) Close() error {
	s.mu.Lock()
	for b, c := range s.streams {
		c.Close()
		delete(s.streams, b)
	}
	s.mu.Unlock()
	return s.db.Close()
}

type value struct {
	Type   string          `json:"type"`
	Value  json.RawMessage `json:"value,omitempty"`
	Base64 *string         `json:"base64,omitempty"`
}

type stmt struct {
	SQL       *string `json:"sql"`
	Args      []value `json:"args"`
	NamedArgs []struct {
		Name  string `json:"name"`
		Value value  `json:"value"`
	} `json:"named_args"`
	WantRows *bool `json:"want_rows"`
}

type cond struct {
	Type  string `json:"type"`
	Step  int    `json:"step"`
	Cond  *cond  `json:"cond"`
	Conds []cond `json:"conds"`
}

type request struct {
	Type  string `json:"type"`
	Stmt  *stmt  `json:"stmt"`
	Batch *struct {
		Steps []struct {
			Condition *cond `json:"condition"`
			Stmt      stmt  `json:"stmt"`
		} `json:"steps"`
	} `json:"batch"`
}

type hranaError struct {
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
}

type stmtResult struct {
	Cols             []map[string]any `json:"cols"`
	Rows             [][]value        `json:"rows"`
	AffectedRowCount int64            `json:"affected_row_count"`
	LastInsertRowid  *string          `json:"last_insert_rowid"`
}

// ServeHTTP answers POST /v2/pipeline (and GET /v2).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.Token {
		httpError(w, http.StatusUnauthorized, "Unauthorized: the token is missing or wrong")
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v2":
		w.WriteHeader(http.StatusOK)
		return
	case r.Method != http.MethodPost || r.URL.Path != "/v2/pipeline":
		httpError(w, http.StatusNotFound, "not found")
		return
	}
	var body struct {
		Baton    *string   `json:"baton"`
		Requests []request `json:"requests"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&body); err != nil {
		httpError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	conn, err := s.stream(r.Context(), body.Baton)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	results := make([]map[string]any, 0, len(body.Requests))
	open := true
	for _, req := range body.Requests {
		if !open {
			results = append(results, errResult(errors.New("the stream is closed")))
			continue
		}
		res, err := s.handle(r.Context(), conn, req)
		if err != nil {
			results = append(results, errResult(err))
			continue
		}
		if req.Type == "close" {
			open = false
		}
		results = append(results, map[string]any{"type": "ok", "response": res})
	}
	var baton *string
	if open {
		b := s.keep(conn)
		baton = &b
	} else {
		// A stream closed inside a transaction rolls it back, as closing a
		// connection does; the pooled connection must not keep it.
		conn.ExecContext(context.WithoutCancel(r.Context()), "ROLLBACK")
		conn.Close()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"baton": baton, "base_url": nil, "results": results})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func errResult(err error) map[string]any {
	return map[string]any{"type": "error", "error": hranaError{Message: err.Error(), Code: "SQLITE_ERROR"}}
}

// stream finds the stream a baton names (and retires the baton), or opens one.
func (s *Server) stream(ctx context.Context, baton *string) (*sql.Conn, error) {
	s.mu.Lock()
	s.requests++
	if baton != nil {
		c, ok := s.streams[*baton]
		delete(s.streams, *baton)
		s.mu.Unlock()
		if !ok {
			return nil, errors.New("unknown or used baton")
		}
		return c, nil
	}
	s.mu.Unlock()
	return s.db.Conn(ctx)
}

// keep files conn under a new baton.
func (s *Server) keep(conn *sql.Conn) string {
	var b [16]byte
	rand.Read(b[:])
	baton := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.streams[baton] = conn
	s.mu.Unlock()
	return baton
}

func (s *Server) handle(ctx context.Context, conn *sql.Conn, req request) (map[string]any, error) {
	switch req.Type {
	case "close":
		return map[string]any{"type": "close"}, nil
	case "execute":
		if req.Stmt == nil {
			return nil, errors.New("execute without stmt")
		}
		res, err := execute(ctx, conn, *req.Stmt)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "execute", "result": res}, nil
	case "batch":
		if req.Batch == nil {
			return nil, errors.New("batch without batch")
		}
		n := len(req.Batch.Steps)
		results, errs := make([]*stmtResult, n), make([]*hranaError, n)
		for i, step := range req.Batch.Steps {
			if step.Condition != nil && !holds(*step.Condition, results, errs) {
				continue
			}
			res, err := execute(ctx, conn, step.Stmt)
			if err != nil {
				errs[i] = &hranaError{Message: err.Error(), Code: "SQLITE_ERROR"}
				continue
			}
			results[i] = &res
		}
		return map[string]any{"type": "batch", "result": map[string]any{"step_results": results, "step_errors": errs}}, nil
	}
	return nil, fmt.Errorf("unknown request type %q", req.Type)
}

func holds(c cond, results []*stmtResult, errs []*hranaError) bool {
	switch c.Type {
	case "ok":
		return c.Step < len(results) && results[c.Step] != nil
	case "error":
		return c.Step < len(errs) && errs[c.Step] != nil
	case "not":
		return c.Cond != nil && !holds(*c.Cond, results, errs)
	case "and", "or":
		all, any := true, false
		for _, x := range c.Conds {
			h := holds(x, results, errs)
			all, any = all && h, any || h
		}
		return (c.Type == "and" && all) || (c.Type == "or" && any)
	}
	return false
}

func execute(ctx context.Context, conn *sql.Conn, st stmt) (stmtResult, error) {
	if st.SQL == nil {
		return stmtResult{}, errors.New("stmt without sql")
	}
	var args []any
	for _, a := range st.Args {
		v, err := decode(a)
		if err != nil {
			return stmtResult{}, err
		}
		args = append(args, v)
	}
	for _, a := range st.NamedArgs {
		v, err := decode(a.Value)
		if err != nil {
			return stmtResult{}, err
		}
		args = append(args, sql.Named(a.Name[1:], v))
	}
	rows, err := conn.QueryContext(ctx, *st.SQL, args...)
	if err != nil {
		return stmtResult{}, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	res := stmtResult{Cols: []map[string]any{}, Rows: [][]value{}}
	for _, c := range cols {
		res.Cols = append(res.Cols, map[string]any{"name": c, "decltype": nil})
	}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return stmtResult{}, err
		}
		row := make([]value, len(cols))
		for i, v := range vals {
			row[i] = encode(v)
		}
		if st.WantRows == nil || *st.WantRows {
			res.Rows = append(res.Rows, row)
		}
	}
	if err := rows.Err(); err != nil {
		return stmtResult{}, err
	}
	rows.Close()
	var last int64
	if err := conn.QueryRowContext(ctx, `SELECT changes(), last_insert_rowid()`).Scan(&res.AffectedRowCount, &last); err != nil {
		return stmtResult{}, err
	}
	ls := strconv.FormatInt(last, 10)
	res.LastInsertRowid = &ls
	return res, nil
}

func decode(v value) (any, error) {
	switch v.Type {
	case "null":
		return nil, nil
	case "integer":
		var s string
		if err := json.Unmarshal(v.Value, &s); err != nil {
			return nil, fmt.Errorf("integer value is not a string: %s", v.Value)
		}
		return strconv.ParseInt(s, 10, 64)
	case "float":
		var f float64
		err := json.Unmarshal(v.Value, &f)
		return f, err
	case "text":
		var s string
		err := json.Unmarshal(v.Value, &s)
		return s, err
	case "blob":
		if v.Base64 == nil {
			return nil, errors.New("blob without base64")
		}
		return base64.StdEncoding.DecodeString(*v.Base64)
	}
	return nil, fmt.Errorf("unknown value type %q", v.Type)
}

func encode(v any) value {
	raw := func(x any) json.RawMessage { b, _ := json.Marshal(x); return b }
	switch x := v.(type) {
	case int64:
		return value{Type: "integer", Value: raw(strconv.FormatInt(x, 10))}
	case float64:
		return value{Type: "float", Value: raw(x)}
	case string:
		return value{Type: "text", Value: raw(x)}
	case []byte:
		b := base64.StdEncoding.EncodeToString(x)
		return value{Type: "blob", Base64: &b}
	}
	return value{Type: "null"}
}
