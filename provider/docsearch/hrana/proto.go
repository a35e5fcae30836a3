package hrana

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The JSON shapes of Hrana over HTTP (libSQL's docs/HTTP_V2_SPEC.md and the shared
// structures of HRANA_3_SPEC.md). Only what this client sends and reads is here;
// unknown fields of a response are ignored, as the spec asks.

type pipelineReq struct {
	Baton    *string         `json:"baton"`
	Requests []streamRequest `json:"requests"`
}

type streamRequest struct {
	Type  string     `json:"type"` // execute | batch | close
	Stmt  *wireStmt  `json:"stmt,omitempty"`
	Batch *wireBatch `json:"batch,omitempty"`
}

type wireStmt struct {
	SQL       string         `json:"sql"`
	Args      []wireValue    `json:"args,omitempty"`
	NamedArgs []wireNamedArg `json:"named_args,omitempty"`
	WantRows  bool           `json:"want_rows"`
}

type wireNamedArg struct {
	Name  string    `json:"name"`
	Value wireValue `json:"value"`
}

type wireBatch struct {
	Steps []wireStep `json:"steps"`
}

type wireStep struct {
	Condition *wireCond `json:"condition,omitempty"`
	Stmt      wireStmt  `json:"stmt"`
}

// wireCond is the "ok" batch condition: run a step only when an earlier one succeeded.
type wireCond struct {
	Type string `json:"type"`
	Step int    `json:"step"`
}

// wireValue is a Value on the wire: {"type":"null"}, {"type":"integer","value":"42"},
// {"type":"float","value":1.5}, {"type":"text","value":"x"}, {"type":"blob","base64":"…"}.
type wireValue struct {
	Type   string          `json:"type"`
	Value  json.RawMessage `json:"value,omitempty"`
	Base64 *string         `json:"base64,omitempty"`
}

type pipelineResp struct {
	Baton   *string        `json:"baton"`
	BaseURL *string        `json:"base_url"`
	Results []streamResult `json:"results"`
}

type streamResult struct {
	Type     string          `json:"type"` // ok | error
	Response *streamResponse `json:"response"`
	Error    *Error          `json:"error"`
}

type streamResponse struct {
	Type   string          `json:"type"`
	Result json.RawMessage `json:"result"`
}

type wireStmtResult struct {
	Cols []struct {
		Name *string `json:"name"`
	} `json:"cols"`
	Rows             [][]wireValue `json:"rows"`
	AffectedRowCount *uint64       `json:"affected_row_count"`
	LastInsertRowid  *string       `json:"last_insert_rowid"`
}

type wireBatchResult struct {
	StepResults []*json.RawMessage `json:"step_results"`
	StepErrors  []*Error           `json:"step_errors"`
}

// Error is an error the server reported for a statement or a request ({"message",
// "code"}); an SQL error such as a constraint violation is one.
type Error struct {
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
}

func (e *Error) Error() string {
	if e.Code != "" {
		return "libsql: " + e.Code + ": " + e.Message
	}
	return "libsql: " + e.Message
}

// Result is the result of one statement.
type Result struct {
	// Columns are the result's column names (empty for a nameless column).
	Columns []string
	// Rows hold nil, int64, float64, string or []byte values.
	Rows [][]any
	// RowsAffected is the server's affected_row_count.
	RowsAffected int64
	// LastInsertID is the server's last_insert_rowid; HasLastInsertID says whether it
	// sent one.
	LastInsertID    int64
	HasLastInsertID bool
}

// encodeValue turns a Go value (what database/sql passes a driver, plus int and
// bool) into a Hrana value.
func encodeValue(v any) (wireValue, error) {
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	switch x := v.(type) {
	case nil:
		return wireValue{Type: "null"}, nil
	case int64:
		return wireValue{Type: "integer", Value: str(strconv.FormatInt(x, 10))}, nil
	case int:
		return wireValue{Type: "integer", Value: str(strconv.Itoa(x))}, nil
	case bool:
		if x {
			return wireValue{Type: "integer", Value: str("1")}, nil
		}
		return wireValue{Type: "integer", Value: str("0")}, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return wireValue{}, fmt.Errorf("hrana: float %v has no JSON form", x)
		}
		return wireValue{Type: "float", Value: json.RawMessage(strconv.FormatFloat(x, 'g', -1, 64))}, nil
	case string:
		return wireValue{Type: "text", Value: str(x)}, nil
	case []byte:
		if x == nil {
			return wireValue{Type: "null"}, nil
		}
		b := base64.StdEncoding.EncodeToString(x)
		return wireValue{Type: "blob", Base64: &b}, nil
	case time.Time:
		return wireValue{Type: "text", Value: str(x.UTC().Format(time.RFC3339Nano))}, nil
	default:
		return wireValue{}, fmt.Errorf("hrana: unsupported argument type %T", v)
	}
}

// decodeValue turns a Hrana value from the server into nil, int64, float64, string or
// []byte, refusing anything else.
func decodeValue(w wireValue) (any, error) {
	switch w.Type {
	case "null":
		return nil, nil
	case "integer":
		var s string
		if err := json.Unmarshal(w.Value, &s); err != nil {
			return nil, fmt.Errorf("integer value: want a string of digits")
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("integer value %q: not a 64-bit integer", truncate(s))
		}
		return n, nil
	case "float":
		var f float64
		if len(w.Value) == 0 || w.Value[0] == '"' || json.Unmarshal(w.Value, &f) != nil {
			return nil, fmt.Errorf("float value: want a JSON number")
		}
		return f, nil
	case "text":
		var s string
		if len(w.Value) == 0 || json.Unmarshal(w.Value, &s) != nil {
			return nil, fmt.Errorf("text value: want a JSON string")
		}
		return s, nil
	case "blob":
		if w.Base64 == nil {
			return nil, fmt.Errorf("blob value: no base64")
		}
		// Servers differ on padding: accept both.
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(*w.Base64, "="))
		if err != nil {
			return nil, fmt.Errorf("blob value: %w", err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("value of unknown type %q", truncate(w.Type))
	}
}

// decodeStmtResult checks and converts an execute result (or a batch step's).
func decodeStmtResult(raw json.RawMessage) (Result, error) {
	var w wireStmtResult
	if err := json.Unmarshal(raw, &w); err != nil {
		return Result{}, fmt.Errorf("statement result: %w", err)
	}
	if w.Cols == nil || w.Rows == nil {
		return Result{}, fmt.Errorf("statement result: no cols or rows")
	}
	r := Result{Columns: make([]string, len(w.Cols)), Rows: make([][]any, 0, len(w.Rows))}
	for i, c := range w.Cols {
		if c.Name != nil {
			r.Columns[i] = *c.Name
		}
	}
	for i, row := range w.Rows {
		if len(row) != len(w.Cols) {
			return Result{}, fmt.Errorf("statement result: row %d has %d values for %d columns", i, len(row), len(w.Cols))
		}
		vals := make([]any, len(row))
		for j, v := range row {
			x, err := decodeValue(v)
			if err != nil {
				return Result{}, fmt.Errorf("statement result: row %d column %d: %w", i, j, err)
			}
			vals[j] = x
		}
		r.Rows = append(r.Rows, vals)
	}
	if w.AffectedRowCount != nil {
		if *w.AffectedRowCount > math.MaxInt64 {
			return Result{}, fmt.Errorf("statement result: affected_row_count out of range")
		}
		r.RowsAffected = int64(*w.AffectedRowCount)
	}
	if w.LastInsertRowid != nil {
		n, err := strconv.ParseInt(*w.LastInsertRowid, 10, 64)
		if err != nil {
			return Result{}, fmt.Errorf("statement result: last_insert_rowid %q: not a 64-bit integer", truncate(*w.LastInsertRowid))
		}
		r.LastInsertID, r.HasLastInsertID = n, true
	}
	return r, nil
}

// decodeResponse checks a pipeline response against the requests it answers: one
// result per request, each ok result of the request's type. It returns the stream's
// next baton and base URL and, per request, its statement results (one for execute,
// one per step for batch, none for close) or its error. A batch step's error is
// returned as that step's error inside errs[i] when the whole request did not fail.
func decodeResponse(raw []byte, reqs []streamRequest) (resp pipelineResp, results [][]Result, errs []error, err error) {
	if err := json.Unmarshal(raw, &resp); err != nil {
		return resp, nil, nil, fmt.Errorf("decode response: %w", err)
	}
	if len(resp.Results) != len(reqs) {
		return resp, nil, nil, fmt.Errorf("decode response: %d results for %d requests", len(resp.Results), len(reqs))
	}
	if resp.Baton != nil && (len(*resp.Baton) > 4096 || !utf8.ValidString(*resp.Baton)) {
		return resp, nil, nil, fmt.Errorf("decode response: baton of %d bytes", len(*resp.Baton))
	}
	results, errs = make([][]Result, len(reqs)), make([]error, len(reqs))
	for i, r := range resp.Results {
		switch r.Type {
		case "error":
			if r.Error == nil {
				return resp, nil, nil, fmt.Errorf("decode response: result %d: error without a message", i)
			}
			errs[i] = r.Error
		case "ok":
			if r.Response == nil || r.Response.Type != reqs[i].Type {
				return resp, nil, nil, fmt.Errorf("decode response: result %d: want a %q response", i, reqs[i].Type)
			}
			res, stepErr, err := decodeOK(r.Response, reqs[i])
			if err != nil {
				return resp, nil, nil, fmt.Errorf("decode response: result %d: %w", i, err)
			}
			results[i], errs[i] = res, stepErr
		default:
			return resp, nil, nil, fmt.Errorf("decode response: result %d: unknown type %q", i, truncate(r.Type))
		}
	}
	return resp, results, errs, nil
}

// decodeOK decodes one ok response; stepErr is the first failed step of a batch.
func decodeOK(r *streamResponse, req streamRequest) (res []Result, stepErr error, err error) {
	switch req.Type {
	case "close":
		return nil, nil, nil
	case "execute":
		x, err := decodeStmtResult(r.Result)
		if err != nil {
			return nil, nil, err
		}
		return []Result{x}, nil, nil
	}
	var b wireBatchResult
	if err := json.Unmarshal(r.Result, &b); err != nil {
		return nil, nil, fmt.Errorf("batch result: %w", err)
	}
	n := len(req.Batch.Steps)
	if len(b.StepResults) != n || len(b.StepErrors) != n {
		return nil, nil, fmt.Errorf("batch result: %d results and %d errors for %d steps", len(b.StepResults), len(b.StepErrors), n)
	}
	res = make([]Result, n)
	for i := range n {
		switch {
		case b.StepErrors[i] != nil:
			if stepErr == nil {
				stepErr = fmt.Errorf("step %d: %w", i, b.StepErrors[i])
			}
		case b.StepResults[i] != nil:
			if res[i], err = decodeStmtResult(*b.StepResults[i]); err != nil {
				return nil, nil, fmt.Errorf("batch step %d: %w", i, err)
			}
		default:
			if stepErr == nil {
				stepErr = fmt.Errorf("step %d was skipped", i)
			}
		}
	}
	return res, stepErr, nil
}

// truncate keeps server-sent strings in error messages short.
func truncate(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
