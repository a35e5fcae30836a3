package e2bserver

import (
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// readStreamRequest reads the single enveloped request message of a server-streaming
// call.
func readStreamRequest(w http.ResponseWriter, r *http.Request, v any) *e2bwire.ConnectError {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != e2bwire.ContentTypeConnectJSON {
		return &e2bwire.ConnectError{Code: e2bwire.CodeInvalidArgument, Message: "content type must be application/connect+json"}
	}
	env, err := e2bwire.ReadEnvelope(http.MaxBytesReader(w, r.Body, maxJSON))
	if err != nil {
		return &e2bwire.ConnectError{Code: e2bwire.CodeInvalidArgument, Message: "read request: " + err.Error()}
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		return &e2bwire.ConnectError{Code: e2bwire.CodeInvalidArgument, Message: "invalid JSON: " + err.Error()}
	}
	return nil
}

// stream writes enveloped events of a server-streaming response.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newStream(w http.ResponseWriter) *stream {
	return &stream{w: w, rc: http.NewResponseController(w)}
}

func (st *stream) begin() {
	if !st.started {
		st.w.Header().Set("Content-Type", e2bwire.ContentTypeConnectJSON)
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
}

func (st *stream) send(ev e2bwire.ProcessEvent) error {
	return st.sendMsg(e2bwire.StreamResponse{Event: ev})
}

// sendMsg writes one message of any server stream.
func (st *stream) sendMsg(v any) error {
	st.begin()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := e2bwire.WriteEnvelope(st.w, 0, b); err != nil {
		return err
	}
	return st.rc.Flush()
}

// end writes the end-of-stream envelope, with ce when the call failed.
func (st *stream) end(ce *e2bwire.ConnectError) {
	st.begin()
	b, _ := json.Marshal(e2bwire.EndStream{Error: ce})
	_ = e2bwire.WriteEnvelope(st.w, e2bwire.FlagEndStream, b)
	_ = st.rc.Flush()
}

func (c envdCall) startStream(w http.ResponseWriter, r *http.Request) {
	st := newStream(w)
	var req e2bwire.StartRequest
	if ce := readStreamRequest(w, r, &req); ce != nil {
		st.end(ce)
		return
	}
	p, sub, err := c.procs.start(c.s.base, c.s.o.Engine, c.eid, req, &c.s.wg)
	if err != nil {
		st.end(asConnect(err))
		return
	}
	if err := st.send(e2bwire.ProcessEvent{Start: &e2bwire.StartEvent{PID: p.pid}}); err != nil {
		p.unsubscribe(sub)
		return
	}
	c.follow(st, r, p, sub)
}

func (c envdCall) connectStream(w http.ResponseWriter, r *http.Request) {
	st := newStream(w)
	var req e2bwire.ConnectRequest
	if ce := readStreamRequest(w, r, &req); ce != nil {
		st.end(ce)
		return
	}
	p, err := c.procs.find(req.Process)
	if err != nil {
		st.end(asConnect(err))
		return
	}
	sub, end := p.subscribe()
	if err := st.send(e2bwire.ProcessEvent{Start: &e2bwire.StartEvent{PID: p.pid}}); err != nil {
		if sub != nil {
			p.unsubscribe(sub)
		}
		return
	}
	if end != nil {
		_ = st.send(e2bwire.ProcessEvent{End: end})
		st.end(nil)
		return
	}
	c.follow(st, r, p, sub)
}

// follow streams a process's events until it ends, the client goes, or the call's
// Connect-Timeout-Ms passes. The process outlives the stream.
func (c envdCall) follow(st *stream, r *http.Request, p *proc, sub *sub) {
	defer p.unsubscribe(sub)
	deadline, keepalive, stop := callTimers(r)
	defer stop()
	for {
		select {
		case <-sub.notify:
			evs, over := sub.take()
			for _, ev := range evs {
				if err := st.send(ev); err != nil {
					return
				}
				if ev.End != nil {
					st.end(nil)
					return
				}
			}
			if over {
				st.end(&e2bwire.ConnectError{Code: "resource_exhausted", Message: "stream fell behind the process output"})
				return
			}
		case <-keepalive:
			if err := st.send(e2bwire.ProcessEvent{Keepalive: &struct{}{}}); err != nil {
				return
			}
		case <-deadline:
			st.end(&e2bwire.ConnectError{Code: e2bwire.CodeDeadlineExceeded, Message: "stream timeout"})
			return
		case <-r.Context().Done():
			return
		}
	}
}

// callTimers are a streaming call's deadline (Connect-Timeout-Ms) and keep-alive
// ticker (Keepalive-Ping-Interval), nil channels where the client asked for none;
// stop releases them.
func callTimers(r *http.Request) (deadline, keepalive <-chan time.Time, stop func()) {
	var stops []func()
	if ms, err := strconv.ParseInt(r.Header.Get(e2bwire.HeaderTimeoutMs), 10, 64); err == nil && ms > 0 {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		stops = append(stops, func() { t.Stop() })
		deadline = t.C
	}
	if sec, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && sec > 0 {
		t := time.NewTicker(time.Duration(sec) * time.Second)
		stops = append(stops, t.Stop)
		keepalive = t.C
	}
	return deadline, keepalive, func() {
		for _, f := range stops {
			f()
		}
	}
}
