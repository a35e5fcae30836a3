package hrana

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeValue(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    any
		wantErr string
	}{
		{"null", `{"type":"null"}`, nil, ""},
		{"integer", `{"type":"integer","value":"-42"}`, int64(-42), ""},
		{"max integer", `{"type":"integer","value":"9223372036854775807"}`, int64(math.MaxInt64), ""},
		{"integer as number", `{"type":"integer","value":42}`, nil, "want a string"},
		{"integer overflow", `{"type":"integer","value":"9223372036854775808"}`, nil, "not a 64-bit integer"},
		{"integer not digits", `{"type":"integer","value":"4x"}`, nil, "not a 64-bit integer"},
		{"float", `{"type":"float","value":1.5}`, 1.5, ""},
		{"float integral", `{"type":"float","value":3}`, 3.0, ""},
		{"float as string", `{"type":"float","value":"1.5"}`, nil, "want a JSON number"},
		{"float missing", `{"type":"float"}`, nil, "want a JSON number"},
		{"text", `{"type":"text","value":"héllo"}`, "héllo", ""},
		{"empty text", `{"type":"text","value":""}`, "", ""},
		{"text missing", `{"type":"text"}`, nil, "want a JSON string"},
		{"text as number", `{"type":"text","value":1}`, nil, "want a JSON string"},
		{"blob padded", `{"type":"blob","base64":"AQID"}`, []byte{1, 2, 3}, ""},
		{"blob padded short", `{"type":"blob","base64":"AQ=="}`, []byte{1}, ""},
		{"blob unpadded", `{"type":"blob","base64":"AQ"}`, []byte{1}, ""},
		{"empty blob", `{"type":"blob","base64":""}`, []byte{}, ""},
		{"blob without base64", `{"type":"blob","value":"AQ"}`, nil, "no base64"},
		{"blob not base64", `{"type":"blob","base64":"!!"}`, nil, "blob value"},
		{"unknown type", `{"type":"decimal","value":"1"}`, nil, "unknown type"},
		{"no type", `{}`, nil, "unknown type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w wireValue
			if err := json.Unmarshal([]byte(tt.in), &w); err != nil {
				t.Fatal(err)
			}
			got, err := decodeValue(w)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("decodeValue(%s) = %v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !cmp.Equal(got, tt.want) {
				t.Errorf("decodeValue(%s) = %#v, %v; want %#v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestEncodeValue(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{nil, `{"type":"null"}`},
		{int64(-7), `{"type":"integer","value":"-7"}`},
		{3, `{"type":"integer","value":"3"}`},
		{true, `{"type":"integer","value":"1"}`},
		{false, `{"type":"integer","value":"0"}`},
		{0.25, `{"type":"float","value":0.25}`},
		{1e300, `{"type":"float","value":1e+300}`},
		{"a\"b", `{"type":"text","value":"a\"b"}`},
		{[]byte{0xff, 0}, `{"type":"blob","base64":"/wA="}`},
		{[]byte(nil), `{"type":"null"}`},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), `{"type":"text","value":"2026-01-02T03:04:05Z"}`},
	}
	for _, tt := range tests {
		w, err := encodeValue(tt.in)
		if err != nil {
			t.Errorf("encodeValue(%#v): %v", tt.in, err)
			continue
		}
		got, _ := json.Marshal(w)
		if string(got) != tt.want {
			t.Errorf("encodeValue(%#v) = %s, want %s", tt.in, got, tt.want)
		}
		// What we send, we read back the same (time goes as text).
		if _, isTime := tt.in.(time.Time); isTime {
			continue
		}
		back, err := decodeValue(w)
		want := tt.in
		switch x := tt.in.(type) {
		case int:
			want = int64(x)
		case bool:
			want = map[bool]int64{true: 1, false: 0}[x]
		case []byte:
			if x == nil {
				want = nil
			}
		}
		if err != nil || !cmp.Equal(back, want) {
			t.Errorf("decodeValue(encodeValue(%#v)) = %#v, %v", tt.in, back, err)
		}
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), struct{}{}, uint64(1)} {
		if _, err := encodeValue(bad); err == nil {
			t.Errorf("encodeValue(%#v) succeeded", bad)
		}
	}
}

var (
	execReq  = streamRequest{Type: "execute", Stmt: &wireStmt{SQL: "SELECT 1"}}
	closeReq = streamRequest{Type: "close"}
	batchReq = streamRequest{Type: "batch", Batch: &wireBatch{Steps: []wireStep{{Stmt: wireStmt{SQL: "a"}}, {Stmt: wireStmt{SQL: "b"}}}}}
)

func TestDecodeResponse(t *testing.T) {
	const okExec = `{"type":"ok","response":{"type":"execute","result":{"cols":[{"name":"n","decltype":null},{"name":null}],
		"rows":[[{"type":"integer","value":"1"},{"type":"text","value":"x"}]],"affected_row_count":0,"last_insert_rowid":"7"}}}`
	const okClose = `{"type":"ok","response":{"type":"close"}}`
	tests := []struct {
		name    string
		reqs    []streamRequest
		body    string
		want    [][]Result
		wantErr string // of the whole response
		stepErr []string
	}{
		{name: "execute and close", reqs: []streamRequest{execReq, closeReq},
			body:    `{"baton":null,"base_url":null,"results":[` + okExec + `,` + okClose + `],"extra":1}`,
			want:    [][]Result{{{Columns: []string{"n", ""}, Rows: [][]any{{int64(1), "x"}}, LastInsertID: 7, HasLastInsertID: true}}, nil},
			stepErr: []string{"", ""}},
		{name: "statement error", reqs: []streamRequest{execReq, closeReq},
			body:    `{"baton":null,"results":[{"type":"error","error":{"message":"no such table: t","code":"SQLITE_ERROR"}},` + okClose + `]}`,
			want:    [][]Result{nil, nil},
			stepErr: []string{"libsql: SQLITE_ERROR: no such table: t", ""}},
		{name: "batch with a failed step", reqs: []streamRequest{batchReq},
			body: `{"baton":"b","results":[{"type":"ok","response":{"type":"batch","result":{
				"step_results":[{"cols":[],"rows":[],"affected_row_count":2},null],
				"step_errors":[null,{"message":"constraint"}]}}}]}`,
			want:    [][]Result{{{Columns: []string{}, Rows: [][]any{}, RowsAffected: 2}, {}}},
			stepErr: []string{"step 1: libsql: constraint"}},
		{name: "batch with a skipped step", reqs: []streamRequest{batchReq},
			body: `{"baton":"b","results":[{"type":"ok","response":{"type":"batch","result":{
				"step_results":[{"cols":[],"rows":[]},null],"step_errors":[null,null]}}}]}`,
			want:    [][]Result{{{Columns: []string{}, Rows: [][]any{}}, {}}},
			stepErr: []string{"step 1 was skipped"}},
		{name: "not JSON", reqs: []streamRequest{execReq}, body: `<html>`, wantErr: "decode response"},
		{name: "too few results", reqs: []streamRequest{execReq, closeReq}, body: `{"results":[` + okClose + `]}`, wantErr: "1 results for 2 requests"},
		{name: "no results", reqs: []streamRequest{execReq}, body: `{}`, wantErr: "0 results for 1 requests"},
		{name: "response of another type", reqs: []streamRequest{execReq}, body: `{"results":[` + okClose + `]}`, wantErr: `want a "execute" response`},
		{name: "ok without response", reqs: []streamRequest{execReq}, body: `{"results":[{"type":"ok"}]}`, wantErr: `want a "execute" response`},
		{name: "error without error", reqs: []streamRequest{execReq}, body: `{"results":[{"type":"error"}]}`, wantErr: "error without a message"},
		{name: "unknown result type", reqs: []streamRequest{execReq}, body: `{"results":[{"type":"maybe"}]}`, wantErr: "unknown type"},
		{name: "row too short", reqs: []streamRequest{execReq},
			body:    `{"results":[{"type":"ok","response":{"type":"execute","result":{"cols":[{"name":"a"}],"rows":[[]]}}}]}`,
			wantErr: "row 0 has 0 values for 1 columns"},
		{name: "no rows", reqs: []streamRequest{execReq},
			body: `{"results":[{"type":"ok","response":{"type":"execute","result":{"cols":[]}}}]}`, wantErr: "no cols or rows"},
		{name: "bad value", reqs: []streamRequest{execReq},
			body:    `{"results":[{"type":"ok","response":{"type":"execute","result":{"cols":[{"name":"a"}],"rows":[[{"type":"integer","value":"x"}]]}}}]}`,
			wantErr: "row 0 column 0"},
		{name: "bad last_insert_rowid", reqs: []streamRequest{execReq},
			body:    `{"results":[{"type":"ok","response":{"type":"execute","result":{"cols":[],"rows":[],"last_insert_rowid":"1.5"}}}]}`,
			wantErr: "last_insert_rowid"},
		{name: "batch result of the wrong length", reqs: []streamRequest{batchReq},
			body:    `{"results":[{"type":"ok","response":{"type":"batch","result":{"step_results":[null],"step_errors":[null]}}}]}`,
			wantErr: "for 2 steps"},
		{name: "huge baton", reqs: []streamRequest{closeReq},
			body: `{"baton":"` + strings.Repeat("b", 5000) + `","results":[` + okClose + `]}`, wantErr: "baton of 5000 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, errs, err := decodeResponse([]byte(tt.body), tt.reqs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("decodeResponse = %v; want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			for i, want := range tt.stepErr {
				var msg string
				if errs[i] != nil {
					msg = errs[i].Error()
				}
				if msg != want {
					t.Errorf("error of request %d = %q, want %q", i, msg, want)
				}
			}
			var he *Error
			if tt.name == "statement error" && (!errors.As(errs[0], &he) || he.Code != "SQLITE_ERROR") {
				t.Errorf("statement error = %#v, want a *Error with its code", errs[0])
			}
		})
	}
}

// FuzzDecodeResponse feeds the decoder what a hostile or broken server could send: it
// must not panic, and what it accepts must be consistent with the requests.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"baton":"x","base_url":null,"results":[{"type":"ok","response":{"type":"execute","result":{"cols":[{"name":"a"}],"rows":[[{"type":"blob","base64":"AAE="}]],"affected_row_count":1,"last_insert_rowid":"3"}}},{"type":"ok","response":{"type":"close"}}]}`))
	f.Add([]byte(`{"results":[{"type":"ok","response":{"type":"batch","result":{"step_results":[null,{"cols":[],"rows":[]}],"step_errors":[{"message":"m"},null]}}}]}`))
	f.Add([]byte(`{"results":[{"type":"error","error":{"message":"boom","code":"X"}},{"type":"ok","response":{"type":"close"}}]}`))
	f.Add([]byte(`{"results":[{"type":"ok","response":{"type":"execute","result":{"cols":[],"rows":[[{"type":"float","value":1e999}]]}}}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, reqs := range [][]streamRequest{{execReq, closeReq}, {batchReq}} {
			_, results, errs, err := decodeResponse(body, reqs)
			if err != nil {
				continue
			}
			if len(results) != len(reqs) || len(errs) != len(reqs) {
				t.Fatalf("%d results, %d errors for %d requests", len(results), len(errs), len(reqs))
			}
			for i, r := range reqs {
				if errs[i] == nil && r.Type == "execute" && len(results[i]) != 1 {
					t.Fatalf("execute request %d has %d results", i, len(results[i]))
				}
				if errs[i] == nil && r.Type == "batch" && len(results[i]) != len(r.Batch.Steps) {
					t.Fatalf("batch has %d results for %d steps", len(results[i]), len(r.Batch.Steps))
				}
				for _, res := range results[i] {
					for _, row := range res.Rows {
						if len(row) != len(res.Columns) {
							t.Fatalf("row of %d values for %d columns", len(row), len(res.Columns))
						}
						for _, v := range row {
							switch v.(type) {
							case nil, int64, float64, string, []byte:
							default:
								t.Fatalf("value of type %T", v)
							}
						}
					}
				}
			}
		}
	})
}
