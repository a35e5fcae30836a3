package proliferate

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// gateway is an httptest actions gateway; handle answers each request.
type gateway struct {
	mu     sync.Mutex
	reqs   []string // "METHOD path body"
	handle func(w http.ResponseWriter, r *http.Request, body string)
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.reqs = append(g.reqs, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(b)))
	g.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer gw-token" {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"bad token"}`)
		return
	}
	g.handle(w, r, string(b))
}

func (g *gateway) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.reqs...)
}

func newGateway(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body string)) (*gateway, map[string]string) {
	g := &gateway{handle: handle}
	url := newServer(t, g)
	return g, map[string]string{"PROLIFERATE_GATEWAY_URL": url + "/", "PROLIFERATE_SESSION_ID": "sess-1", "SANDBOX_MCP_AUTH_TOKEN": "gw-token"}
}

func reply(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

const base = "/proliferate/sess-1/actions"

func TestActionsRun(t *testing.T) {
	tests := []struct {
		name     string
		invoke   func(w http.ResponseWriter)
		polls    []string // answers of GET /invocations/inv-1, in order
		params   []string
		code     int
		stdout   string
		stderr   string
		wantReqs int
	}{
		{
			name:   "200 result",
			invoke: func(w http.ResponseWriter) { reply(w, 200, `{"result": {"ok": true, "n": [1, 2]}}`) },
			params: []string{"--params", `{"q":"--x"}`},
			code:   0, stdout: `{"ok":true,"n":[1,2]}` + "\n", wantReqs: 1,
		},
		{
			name:   "200 without result prints the body",
			invoke: func(w http.ResponseWriter) { reply(w, 200, `{"status": "queued"}`) },
			code:   0, stdout: `{"status":"queued"}` + "\n", wantReqs: 1,
		},
		{
			name:   "403 with error",
			invoke: func(w http.ResponseWriter) { reply(w, 403, `{"error":"Integration not connected"}`) },
			code:   1, stderr: "Error: Integration not connected\n", wantReqs: 1,
		},
		{
			name:   "403 without error",
			invoke: func(w http.ResponseWriter) { reply(w, 403, `{}`) },
			code:   1, stderr: "Error: Action denied\n", wantReqs: 1,
		},
		{
			name:   "403 with only message",
			invoke: func(w http.ResponseWriter) { reply(w, 403, `{"message":"Forbidden"}`) },
			code:   1, stderr: "Error: Action denied\n", wantReqs: 1,
		},
		{
			name:   "500 with message",
			invoke: func(w http.ResponseWriter) { reply(w, 500, `{"message":"upstream exploded"}`) },
			code:   1, stderr: "Error: upstream exploded\n", wantReqs: 1,
		},
		{
			name:   "502 page",
			invoke: func(w http.ResponseWriter) { w.WriteHeader(502); io.WriteString(w, "<html>") },
			code:   1, stderr: "Error: HTTP 502\n", wantReqs: 1,
		},
		{
			name:   "202 pending twice then completed",
			invoke: func(w http.ResponseWriter) { reply(w, 202, `{"invocation":{"id":"inv-1","status":"pending"}}`) },
			polls: []string{
				`{"invocation":{"id":"inv-1","status":"pending"}}`,
				`{"invocation":{"id":"inv-1","status":"pending"}}`,
				`{"invocation":{"id":"inv-1","status":"completed","result":{"sent":true}}}`,
			},
			code: 0, stdout: `{"sent":true}` + "\n", stderr: "Waiting for approval...\n", wantReqs: 4,
		},
		{
			name:   "202 then denied",
			invoke: func(w http.ResponseWriter) { reply(w, 202, `{"invocation":{"id":"inv-1","status":"pending"}}`) },
			polls:  []string{`{"invocation":{"id":"inv-1","status":"denied","error":"User rejected the request"}}`},
			code:   1, stderr: "Waiting for approval...\nError: Action denied: User rejected the request\n", wantReqs: 2,
		},
		{
			name:   "202 then expired without error",
			invoke: func(w http.ResponseWriter) { reply(w, 202, `{"invocation":{"id":"inv-1"}}`) },
			polls:  []string{`{"status":"expired"}`},
			code:   1, stderr: "Waiting for approval...\nError: Action expired: \n", wantReqs: 2,
		},
		{
			name:   "202 then poll fails",
			invoke: func(w http.ResponseWriter) { reply(w, 202, `{"invocation":{"id":"inv-1"}}`) },
			polls:  []string{"500:" + `{"error":"db down"}`},
			code:   1, stderr: "Waiting for approval...\nError: db down\n", wantReqs: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			polls := tc.polls
			g, env := newGateway(t, func(w http.ResponseWriter, r *http.Request, body string) {
				switch {
				case r.Method == "POST" && r.URL.Path == base+"/invoke":
					tc.invoke(w)
				case r.Method == "GET" && r.URL.Path == base+"/invocations/inv-1":
					mu.Lock()
					defer mu.Unlock()
					if len(polls) == 0 {
						reply(w, 500, `{"error":"polled too often"}`)
						return
					}
					p := polls[0]
					polls = polls[1:]
					if b, ok := strings.CutPrefix(p, "500:"); ok {
						reply(w, 500, b)
						return
					}
					reply(w, 200, p)
				default:
					reply(w, 404, `{"error":"no route"}`)
				}
			})
			args := append([]string{"actions", "run", "--integration", "slack", "--action", "send"}, tc.params...)
			r := cli(t, t.Context(), env, fast, args...)
			if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr {
				t.Errorf("run(%q) = %d %q %q, want %d %q %q", args, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
			}
			reqs := g.requests()
			if len(reqs) != tc.wantReqs {
				t.Errorf("gateway got %d requests %q, want %d", len(reqs), reqs, tc.wantReqs)
			}
			params := `{}`
			if len(tc.params) > 0 {
				params = tc.params[1]
			}
			var got, want any
			json.Unmarshal([]byte(strings.TrimPrefix(reqs[0], "POST "+base+"/invoke ")), &got)
			json.Unmarshal([]byte(`{"integration":"slack","action":"send","params":`+params+`}`), &want)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("invoke body (-want +got):\n%s", d)
			}
		})
	}
}

func TestActionsRunInterrupted(t *testing.T) {
	_, env := newGateway(t, func(w http.ResponseWriter, r *http.Request, body string) {
		if r.URL.Path == base+"/invoke" {
			reply(w, 202, `{"invocation":{"id":"inv-9"}}`)
			return
		}
		reply(w, 200, `{"invocation":{"id":"inv-9","status":"pending"}}`)
	})
	ctx, cancel := contextWithCancelAfterPolls(t)
	defer cancel()
	r := cli(t, ctx, env, fast, "actions", "run", "--integration", "i", "--action", "a")
	if r.code != exitInterrupted || r.stderr != "Waiting for approval...\nError: Stopped waiting for approval of invocation inv-9\n" {
		t.Errorf("interrupted run = %d %q, want 130 and the invocation id", r.code, r.stderr)
	}
}

func TestGatewayCommands(t *testing.T) {
	g, env := newGateway(t, func(w http.ResponseWriter, r *http.Request, body string) {
		switch r.Method + " " + strings.TrimPrefix(r.URL.Path, base) {
		case "GET /available":
			reply(w, 200, `{ "integrations": [ {"name": "slack", "actions": ["send"]} ] }`)
		case "GET /guide/slack":
			reply(w, 200, `{"guide":"# Slack\nUse send."}`)
		case "GET /guide/bare":
			reply(w, 200, `{"integration":"bare"}`)
		case "GET /guide/nope":
			reply(w, 404, `{"error":"Unknown integration"}`)
		case "POST /grants":
			if strings.Contains(body, "boom") {
				reply(w, 500, `{"message":"grant store offline"}`)
				return
			}
			reply(w, 200, `{"grant":`+body+`}`)
		case "GET /grants":
			reply(w, 200, `{"grants":[]}`)
		default:
			reply(w, 404, `{}`)
		}
	})
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"actions", "list"}, 0, `{"integrations":[{"name":"slack","actions":["send"]}]}` + "\n", ""},
		{[]string{"actions", "guide", "--integration", "slack"}, 0, "# Slack\nUse send.\n", ""},
		{[]string{"actions", "guide", "--integration=bare"}, 0, `{"integration":"bare"}` + "\n", ""},
		{[]string{"actions", "guide", "--integration", "nope"}, 1, "", "Error: Unknown integration\n"},
		{[]string{"actions", "grant", "request", "--integration", "slack", "--action", "send"}, 0,
			`{"grant":{"integration":"slack","action":"send","scope":"session"}}` + "\n", ""},
		{[]string{"actions", "grant", "request", "--integration", "slack", "--action", "send", "--scope", "org", "--max-calls", "3"}, 0,
			`{"grant":{"integration":"slack","action":"send","scope":"org","maxCalls":3}}` + "\n", ""},
		{[]string{"actions", "grant", "request", "--integration", "boom", "--action", "send"}, 1, "", "Error: grant store offline\n"},
		{[]string{"actions", "grants", "list"}, 0, `{"grants":[]}` + "\n", ""},
	}
	for _, tc := range tests {
		r := cli(t, t.Context(), env, fast, tc.args...)
		if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr {
			t.Errorf("run(%q) = %d %q %q, want %d %q %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
	if reqs := g.requests(); len(reqs) != len(tests) {
		t.Errorf("gateway got %d requests, want %d: %q", len(reqs), len(tests), reqs)
	}

	bad := map[string]string{}
	for k, v := range env {
		bad[k] = v
	}
	bad["SANDBOX_MCP_AUTH_TOKEN"] = "wrong"
	if r := cli(t, t.Context(), bad, fast, "actions", "list"); r.code != 1 || r.stderr != "Error: bad token\n" {
		t.Errorf("list with a wrong token = %d %q", r.code, r.stderr)
	}
}

// contextWithCancelAfterPolls returns a context that ends shortly after the
// test starts polling; the poll interval of fast is 10 ms.
func contextWithCancelAfterPolls(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	timer := time.AfterFunc(200*time.Millisecond, cancel)
	t.Cleanup(func() { timer.Stop() })
	return ctx, cancel
}

func TestApprovalWaiterProgress(t *testing.T) {
	var buf bytes.Buffer
	w := &approvalWaiter{w: &buf}
	w.Start("inv-1")
	for _, s := range []int{2, 4, 10, 12, 20, 21, 40} {
		w.Tick(time.Duration(s)*time.Second + 300*time.Millisecond)
	}
	w.done()
	want := "Waiting for approval...\nStill waiting for approval (10s elapsed)\nStill waiting for approval (20s elapsed)\nStill waiting for approval (40s elapsed)\n"
	if buf.String() != want {
		t.Errorf("progress = %q, want %q", buf.String(), want)
	}
	buf.Reset()
	tty := &approvalWaiter{w: &buf, tty: true}
	tty.Start("inv-1")
	tty.Tick(2 * time.Second)
	tty.Tick(4 * time.Second)
	tty.done()
	if want := "Waiting for approval...\n\rWaiting for approval... 2s elapsed\rWaiting for approval... 4s elapsed\n"; buf.String() != want {
		t.Errorf("terminal progress = %q, want %q", buf.String(), want)
	}
}
