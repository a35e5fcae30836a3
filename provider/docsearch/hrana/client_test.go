package hrana

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana/hranatest"
)

func TestParseURL(t *testing.T) {
	tests := []struct{ in, want, wantErr string }{
		{"libsql://db-org.turso.io", "https://db-org.turso.io", ""},
		{"libsql://db.example:8443/base/", "https://db.example:8443/base", ""},
		{"https://db.example", "https://db.example", ""},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", ""},
		{"wss://db.example", "", "want libsql://"},
		{"file:index.db", "", "want libsql://"},
		{"libsql://", "", "no host"},
		{"libsql://:8080", "", "no host"},
		{"libsql://user:secret@db.example", "", "user info"},
		{"libsql://db.example?authToken=secret", "", "query"},
		{"libsql://db.example?", "", "query"},
		{"libsql://db.example#x", "", "fragment"},
		{"://", "", "libsql url"},
		{"wss://db.example?authToken=secret", "", "query"},
		{"wss://secret@db.example", "", "user info"},
		{"ws://db.example/secret", "", `scheme "ws"`},
		{"https://db.example/%zz-secret", "", "not a URL"},
	}
	for _, tt := range tests {
		u, err := ParseURL(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseURL(%q) = %v, %v; want an error with %q", tt.in, u, err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseURL(%q) error %q shows the secret", tt.in, err)
			}
			continue
		}
		if err != nil || u.String() != tt.want {
			t.Errorf("ParseURL(%q) = %v, %v; want %s", tt.in, u, err, tt.want)
		}
	}
}

// capture is a loopback server that records each request and answers with reply.
type capture struct {
	srv    *httptest.Server
	bodies []map[string]any
	reqs   []*http.Request
	reply  func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

func newCapture(t *testing.T, reply func(w http.ResponseWriter, r *http.Request, body map[string]any)) *capture {
	c := &capture{reply: reply}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body is not JSON: %q", raw)
		}
		c.bodies = append(c.bodies, body)
		c.reqs = append(c.reqs, r)
		c.reply(w, r, body)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func reply(body string) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

func newClient(t *testing.T, url string, o Options) *Client {
	t.Helper()
	o.URL = url
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The requests are the spec's shapes: POST <base>/v2/pipeline, JSON, bearer token,
// {"baton": null, "requests": [{"type": "execute", "stmt": …}, {"type": "close"}]}
// with typed values.
func TestExecuteRequestShape(t *testing.T) {
	cap := newCapture(t, reply(`{"baton":null,"base_url":null,"results":[
		{"type":"ok","response":{"type":"execute","result":{"cols":[{"name":"id","decltype":"INTEGER"}],"rows":[[{"type":"integer","value":"5"}]],"affected_row_count":1,"last_insert_rowid":"5"}}},
		{"type":"ok","response":{"type":"close"}}]}`))
	c := newClient(t, cap.srv.URL+"/db/", Options{Token: "tok-123"})
	res, err := c.Execute(t.Context(), Stmt{SQL: "INSERT INTO t VALUES (?, ?, ?, ?, ?) RETURNING id",
		Args: []any{int64(1) << 60, 0.5, "text", []byte("\x00\x01"), nil}, Named: map[string]any{":n": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Columns: []string{"id"}, Rows: [][]any{{int64(5)}}, RowsAffected: 1, LastInsertID: 5, HasLastInsertID: true}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Execute (-want +got):\n%s", diff)
	}
	r := cap.reqs[0]
	if r.Method != http.MethodPost || r.URL.Path != "/db/v2/pipeline" || r.Header.Get("Authorization") != "Bearer tok-123" ||
		r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request = %s %s, auth %q, type %q", r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"))
	}
	var wantBody map[string]any
	json.Unmarshal([]byte(`{"baton":null,"requests":[
		{"type":"execute","stmt":{"sql":"INSERT INTO t VALUES (?, ?, ?, ?, ?) RETURNING id","want_rows":true,"args":[
			{"type":"integer","value":"1152921504606846976"},{"type":"float","value":0.5},{"type":"text","value":"text"},
			{"type":"blob","base64":"AAE="},{"type":"null"}],
			"named_args":[{"name":":n","value":{"type":"text","value":"v"}}]}},
		{"type":"close"}]}`), &wantBody)
	if diff := cmp.Diff(wantBody, cap.bodies[0]); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

// A batch is one request whose steps after the first run only if the one before
// succeeded; a failed step is the batch's error.
func TestBatchRequestShape(t *testing.T) {
	cap := newCapture(t, reply(`{"baton":null,"results":[{"type":"ok","response":{"type":"batch","result":{
		"step_results":[{"cols":[],"rows":[],"affected_row_count":0},null],"step_errors":[null,{"message":"near \"x\": syntax error","code":"SQLITE_ERROR"}]}}},
		{"type":"ok","response":{"type":"close"}}]}`))
	c := newClient(t, cap.srv.URL, Options{})
	_, err := c.Batch(t.Context(), []Stmt{{SQL: "CREATE TABLE a (x)"}, {SQL: "x"}})
	var se *Error
	if !errors.As(err, &se) || se.Code != "SQLITE_ERROR" || !strings.Contains(err.Error(), "step 1") {
		t.Errorf("Batch = %v, want step 1's SQL error", err)
	}
	if auth := cap.reqs[0].Header.Get("Authorization"); auth != "" {
		t.Errorf("Authorization %q sent without a token", auth)
	}
	var wantBody map[string]any
	json.Unmarshal([]byte(`{"baton":null,"requests":[{"type":"batch","batch":{"steps":[
		{"stmt":{"sql":"CREATE TABLE a (x)","want_rows":true}},
		{"condition":{"type":"ok","step":0},"stmt":{"sql":"x","want_rows":true}}]}},{"type":"close"}]}`), &wantBody)
	if diff := cmp.Diff(wantBody, cap.bodies[0]); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

// A stream sends back the baton of each response and follows a base_url on the same
// host; a response without a baton ends it.
func TestStreamBatonAndBaseURL(t *testing.T) {
	n := 0
	var cap *capture
	cap = newCapture(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		n++
		ok := `{"type":"ok","response":{"type":"execute","result":{"cols":[],"rows":[]}}}`
		switch n {
		case 1:
			io.WriteString(w, `{"baton":"b1","base_url":"`+cap.srv.URL+`/sticky","results":[`+ok+`]}`)
		case 2:
			io.WriteString(w, `{"baton":"b2","base_url":null,"results":[`+ok+`]}`)
		default:
			io.WriteString(w, `{"baton":null,"results":[{"type":"ok","response":{"type":"close"}}]}`)
		}
	})
	st := newClient(t, cap.srv.URL, Options{Token: "t"}).Stream()
	for range 2 {
		if _, err := st.Execute(t.Context(), Stmt{SQL: "SELECT 1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Execute(t.Context(), Stmt{SQL: "SELECT 1"}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Execute on a closed stream = %v", err)
	}
	var got []any
	var paths []string
	for i, b := range cap.bodies {
		got = append(got, b["baton"])
		paths = append(paths, cap.reqs[i].URL.Path)
	}
	if diff := cmp.Diff([]any{nil, "b1", "b2"}, got); diff != "" {
		t.Errorf("batons sent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/v2/pipeline", "/sticky/v2/pipeline", "/sticky/v2/pipeline"}, paths); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
}

// Failures are errors that say what went wrong, and never show the token.
func TestClientErrors(t *testing.T) {
	const token = "s3cret-token"
	tests := []struct {
		name    string
		handler http.HandlerFunc
		o       Options
		check   func(error) bool
		want    string
	}{
		{name: "401 with a JSON error", handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"Unauthorized: `+"`"+`Invalid JWT`+"`"+`"}`)
		}, check: func(err error) bool { return errors.Is(err, ErrUnauthorized) }, want: "HTTP 401 Unauthorized: Unauthorized: `Invalid JWT`"},
		{name: "403", handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) },
			check: func(err error) bool { return errors.Is(err, ErrUnauthorized) }, want: "HTTP 403 Forbidden"},
		{name: "500 with an HTML page", handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>\n<body>bad\tgateway "+strings.Repeat("x", 5000)+"</body></html>")
		}, check: func(err error) bool {
			var he *HTTPError
			return errors.As(err, &he) && he.StatusCode == 502 && len(he.Message) < 300 && !errors.Is(err, ErrUnauthorized)
		}, want: "HTTP 502 Bad Gateway: <html> <body>bad gateway xxx"},
		{name: "a Hrana error body", handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"message":"The stream has expired due to inactivity","code":"STREAM_EXPIRED"}`)
		}, want: "HTTP 400 Bad Request: The stream has expired due to inactivity"},
		{name: "malformed JSON", handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"results":[`) },
			want: "libsql: decode response"},
		{name: "oversized body", o: Options{MaxResponseBytes: 1024}, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"results":[],"pad":"`+strings.Repeat("x", 4096)+`"}`)
		}, want: "libsql: response over 1024 bytes"},
		{name: "an error result", handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"baton":null,"results":[{"type":"error","error":{"message":"no such table: nope","code":"SQLITE_ERROR"}},{"type":"ok","response":{"type":"close"}}]}`)
		}, check: func(err error) bool { var se *Error; return errors.As(err, &se) && se.Code == "SQLITE_ERROR" },
			want: "libsql: SQLITE_ERROR: no such table: nope"},
		{name: "timeout", o: Options{Timeout: 50 * time.Millisecond}, handler: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // the server notices the client leaving only after the body
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, check: func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }, want: "context deadline exceeded"},
		{name: "base_url on another host", handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"baton":"b","base_url":"https://evil.example/","results":[{"type":"ok","response":{"type":"execute","result":{"cols":[],"rows":[]}}},{"type":"ok","response":{"type":"close"}}]}`)
		}, want: `moved the stream to "https://evil.example/"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			tt.o.Token = token
			_, err := newClient(t, srv.URL, tt.o).Execute(t.Context(), Stmt{SQL: "SELECT * FROM nope"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Execute = %v, want an error with %q", err, tt.want)
			}
			if tt.check != nil && !tt.check(err) {
				t.Errorf("Execute = %#v: wrong kind of error", err)
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
	if _, err := New(Options{URL: "libsql://x", Token: "a b"}); err == nil {
		t.Error("New accepted a token with a space")
	}
	// A server that is not there.
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	if _, err := newClient(t, srv.URL, Options{Token: token}).Execute(t.Context(), Stmt{SQL: "SELECT 1"}); err == nil ||
		strings.Contains(err.Error(), token) {
		t.Errorf("Execute against a closed port = %v", err)
	}
}

// hranaServer is a Hrana server on loopback backed by SQLite (hranatest).
func hranaServer(t *testing.T, token string) (*hranatest.Server, string) {
	t.Helper()
	hs, err := hranatest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hs.Token = token
	srv := httptest.NewServer(hs)
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return hs, srv.URL
}

// The database/sql driver over a Hrana server: statements, arguments, results, and
// transactions on one stream each, committed or rolled back, with no stream left open.
func TestDriver(t *testing.T) {
	hs, url := hranaServer(t, "tok")
	db := sql.OpenDB(newClient(t, url, Options{Token: "tok"}).Connector())
	defer db.Close()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE, score REAL, data BLOB)`); err != nil {
		t.Fatal(err)
	}
	res, err := db.ExecContext(ctx, `INSERT INTO t (name, score, data) VALUES (?, ?, ?)`, "a", 1.5, []byte{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := res.LastInsertId(); err != nil || id != 1 {
		t.Errorf("LastInsertId = %d, %v; want 1", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		t.Errorf("RowsAffected = %d, %v; want 1", n, err)
	}
	// A transaction that commits, and one that rolls back.
	for _, commit := range []bool{true, false} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		name := map[bool]string{true: "kept", false: "dropped"}[commit]
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (name, score) VALUES (?, ?)`, name, 2); err != nil {
			t.Fatal(err)
		}
		// An SQL error inside leaves the transaction usable.
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (name) VALUES ('a')`); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
			t.Errorf("duplicate insert = %v, want a UNIQUE error", err)
		}
		var n int
		want := map[bool]int{true: 2, false: 3}[commit]
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != want {
			t.Errorf("count inside the transaction = %d, %v; want %d", n, err, want)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT id, name, score, data FROM t WHERE score >= :min ORDER BY id`, sql.Named("min", 0))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID    int64
		Name  string
		Score float64
		Data  []byte
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.ID, &r.Name, &r.Score, &r.Data); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []row{{1, "a", 1.5, []byte{1, 2}}, {2, "kept", 2, nil}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if n := hs.Streams(); n != 0 {
		t.Errorf("%d streams left open on the server", n)
	}
	// A wrong token is refused as such.
	bad := sql.OpenDB(newClient(t, url, Options{Token: "nope"}).Connector())
	defer bad.Close()
	if err := bad.PingContext(ctx); err != nil {
		t.Fatalf("Ping sends nothing, yet = %v", err)
	}
	if _, err := bad.ExecContext(ctx, `SELECT 1`); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Exec with a wrong token = %v, want ErrUnauthorized", err)
	}
}

// A transaction whose stream the server dropped fails, and its connection is not
// reused.
func TestDriverLostStream(t *testing.T) {
	hs, url := hranaServer(t, "")
	db := sql.OpenDB(newClient(t, url, Options{}).Connector())
	defer db.Close()
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs.Close() // every stream is gone; the database too
	if _, err := tx.ExecContext(ctx, `SELECT 1`); err == nil {
		t.Fatal("Exec on a dropped stream succeeded")
	}
	if err := tx.Commit(); err == nil || !strings.Contains(err.Error(), "stream is gone") {
		t.Errorf("Commit = %v, want the stream to be gone", err)
	}
	if s := db.Stats(); s.Idle != 0 {
		t.Errorf("%d idle connections after a broken one; want it discarded", s.Idle)
	}
}

// A transaction is one stream: BEGIN opens it (baton null), each statement carries the
// baton of the answer before, and COMMIT goes with close.
func TestTransactionRequestShape(t *testing.T) {
	n := 0
	cap := newCapture(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		n++
		ok := `{"type":"ok","response":{"type":"execute","result":{"cols":[],"rows":[],"affected_row_count":1,"last_insert_rowid":"9"}}}`
		if n < 3 {
			io.WriteString(w, `{"baton":"b`+string(rune('0'+n))+`","base_url":null,"results":[`+ok+`]}`)
			return
		}
		io.WriteString(w, `{"baton":null,"base_url":null,"results":[`+ok+`,{"type":"ok","response":{"type":"close"}}]}`)
	})
	db := sql.OpenDB(newClient(t, cap.srv.URL, Options{}).Connector())
	defer db.Close()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.ExecContext(t.Context(), `INSERT INTO t VALUES (?)`, 1)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := res.LastInsertId(); id != 9 {
		t.Errorf("LastInsertId = %d, want 9", id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var want []map[string]any
	json.Unmarshal([]byte(`[
		{"baton":null,"requests":[{"type":"execute","stmt":{"sql":"BEGIN","want_rows":true}}]},
		{"baton":"b1","requests":[{"type":"execute","stmt":{"sql":"INSERT INTO t VALUES (?)","want_rows":true,"args":[{"type":"integer","value":"1"}]}}]},
		{"baton":"b2","requests":[{"type":"execute","stmt":{"sql":"COMMIT","want_rows":true}},{"type":"close"}]}]`), &want)
	if diff := cmp.Diff(want, cap.bodies); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if _, err := db.BeginTx(t.Context(), &sql.TxOptions{ReadOnly: true}); err == nil {
		t.Error("a read-only transaction was accepted")
	}
}

// FuzzParseURL: what ParseURL accepts is an http(s) URL with a host and nothing that
// could carry a secret; what it refuses, it refuses without echoing user info or a
// query.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"libsql://db.turso.io", "http://127.0.0.1:8080/x/", "libsql://u:p@h?authToken=t#f", "wss://h", "%", "libsql://[::1]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := ParseURL(raw)
		if err != nil {
			// Every error is a fixed sentence, except the scheme's, which shows the
			// scheme only.
			msg := err.Error()
			switch msg {
			case "libsql url: not a URL", "libsql url: no host",
				"libsql url: user info is not allowed (the token comes from its own setting)",
				"libsql url: a query or fragment is not allowed (the token comes from its own setting)":
			default:
				p, perr := url.Parse(raw)
				if perr != nil || msg != fmt.Sprintf("libsql url: scheme %q: want libsql://, https:// or http://", truncate(p.Scheme)) {
					t.Fatalf("ParseURL(%q) error %q", raw, msg)
				}
			}
			return
		}
		if (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
			strings.HasSuffix(u.Path, "/") {
			t.Fatalf("ParseURL(%q) = %#v", raw, u)
		}
	})
}
