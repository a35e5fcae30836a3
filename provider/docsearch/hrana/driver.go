package hrana

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Connector returns a database/sql connector for the client: sql.OpenDB(c.Connector()).
// A connection runs each statement outside a transaction on a stream of its own, and a
// transaction on one stream from BEGIN to COMMIT or ROLLBACK. Isolation levels and
// read-only transactions are not offered.
func (c *Client) Connector() driver.Connector { return connector{c} }

type connector struct{ c *Client }

func (k connector) Connect(context.Context) (driver.Conn, error) { return &conn{c: k.c}, nil }
func (k connector) Driver() driver.Driver                        { return drv{} }

// drv exists because driver.Connector must name a driver; opening by name is not
// supported (use Connector).
type drv struct{}

func (drv) Open(string) (driver.Conn, error) {
	return nil, errors.New("libsql: open through hrana.Client.Connector")
}

type conn struct {
	c      *Client
	tx     *Stream // the stream of the open transaction, if any
	broken bool
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
)

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext keeps the text: Hrana statements are sent whole.
func (c *conn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	return &stmt{c: c, query: query}, nil
}

func (c *conn) Close() error {
	if c.tx != nil {
		_ = c.tx.Close(context.Background())
		c.tx = nil
	}
	return nil
}

func (c *conn) IsValid() bool                      { return !c.broken }
func (c *conn) ResetSession(context.Context) error { return c.valid() }

func (c *conn) valid() error {
	if c.broken {
		return driver.ErrBadConn
	}
	return nil
}

// CheckNamedValue lets int and the other Go types encodeValue knows through as they
// are, and refuses the rest before anything is sent.
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if _, err := encodeValue(nv.Value); err == nil {
		return nil
	}
	v, err := driver.DefaultParameterConverter.ConvertValue(nv.Value)
	if err != nil {
		return err
	}
	nv.Value = v
	_, err = encodeValue(v)
	return err
}

func (c *conn) Begin() (driver.Tx, error) { return c.BeginTx(context.Background(), driver.TxOptions{}) }

// BeginTx opens the transaction's stream with BEGIN.
func (c *conn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	if o.ReadOnly || o.Isolation != driver.IsolationLevel(0) {
		return nil, errors.New("libsql: transaction options are not supported")
	}
	if c.tx != nil {
		return nil, errors.New("libsql: a transaction is already open")
	}
	st := c.c.Stream()
	if _, err := st.Execute(ctx, Stmt{SQL: "BEGIN"}); err != nil {
		_ = st.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	c.tx = st
	return tx{c}, nil
}

type tx struct{ c *conn }

func (t tx) Commit() error   { return t.c.end("COMMIT") }
func (t tx) Rollback() error { return t.c.end("ROLLBACK") }

// end sends COMMIT or ROLLBACK and closes the stream in one request.
func (c *conn) end(sql string) error {
	st := c.tx
	c.tx = nil
	if st == nil {
		return errors.New("libsql: no transaction is open")
	}
	if st.closed {
		return fmt.Errorf("libsql: %s: the transaction's stream is gone", strings.ToLower(sql))
	}
	_, err := st.do(context.Background(), true, Stmt{SQL: sql})
	return err
}

func (c *conn) run(ctx context.Context, query string, args []driver.NamedValue) (Result, error) {
	if err := c.valid(); err != nil {
		return Result{}, err
	}
	s := Stmt{SQL: query}
	for _, a := range args {
		if a.Name != "" {
			if s.Named == nil {
				s.Named = map[string]any{}
			}
			s.Named[":"+a.Name] = a.Value
			continue
		}
		s.Args = append(s.Args, a.Value)
	}
	if c.tx == nil {
		return c.c.Execute(ctx, s)
	}
	res, err := c.tx.Execute(ctx, s)
	if c.tx.closed {
		// The stream died with the transaction in it: this connection is done, and
		// database/sql must not reuse it.
		c.broken = true
	}
	return res, err
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.run(ctx, query, args)
	if err != nil {
		return nil, err
	}
	return result{r}, nil
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.run(ctx, query, args)
	if err != nil {
		return nil, err
	}
	return &rows{r: r}, nil
}

type stmt struct {
	c     *conn
	query string
}

func (s *stmt) Close() error  { return nil }
func (s *stmt) NumInput() int { return -1 }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.c.ExecContext(context.Background(), s.query, named(args))
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.c.QueryContext(context.Background(), s.query, named(args))
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.query, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.query, args)
}

func named(args []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return out
}

type result struct{ r Result }

func (r result) LastInsertId() (int64, error) {
	if !r.r.HasLastInsertID {
		return 0, errors.New("libsql: the server sent no last_insert_rowid")
	}
	return r.r.LastInsertID, nil
}

func (r result) RowsAffected() (int64, error) { return r.r.RowsAffected, nil }

// rows are a fully received result.
type rows struct {
	r Result
	i int
}

func (r *rows) Columns() []string { return r.r.Columns }
func (r *rows) Close() error      { return nil }

func (r *rows) Next(dest []driver.Value) error {
	if r.i >= len(r.r.Rows) {
		return io.EOF
	}
	for j, v := range r.r.Rows[r.i] {
		dest[j] = v
	}
	r.i++
	return nil
}
