package e2bserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

var errNoFile = fs.ErrNotExist

// envdSandbox finds the sandbox an envd request is for: the E2b-Sandbox-Id header,
// or a 49983-<id>.<domain> host.
func (s *Server) envdSandboxID(r *http.Request) string {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		return id
	}
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	prefix := strconv.Itoa(e2b.EnvdPort) + "-"
	if rest, ok := strings.CutPrefix(host, prefix); ok {
		if id, _, ok := strings.Cut(rest, "."); ok {
			return id
		}
	}
	return ""
}

// envd serves one sandbox's envd API.
func (s *Server) envd(w http.ResponseWriter, r *http.Request, id string) {
	// A sandbox that is gone or paused answers 502, as E2B's proxy does; health needs
	// no token.
	sb, ok := s.lookup(id)
	if !ok {
		writeJSON(w, http.StatusBadGateway, e2b.APIError{Code: 502, Message: "sandbox " + id + " not found"})
		return
	}
	if r.URL.Path == "/health" && r.Method == http.MethodGet {
		if st, err := s.state(r.Context(), sb); err != nil || st != e2b.StateRunning {
			writeJSON(w, http.StatusBadGateway, e2b.APIError{Code: 502, Message: "sandbox " + id + " is not running"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !s.envdAuthorized(r, sb) {
		writeJSON(w, http.StatusUnauthorized, e2b.APIError{Code: 401, Message: "invalid access token"})
		return
	}
	st, err := s.state(r.Context(), sb)
	if err != nil || st != e2b.StateRunning {
		writeJSON(w, http.StatusBadGateway, e2b.APIError{Code: 502, Message: "sandbox " + id + " is not running"})
		return
	}
	s.mu.Lock()
	eid, procs := sb.engineID, sb.procs
	s.mu.Unlock()
	c := envdCall{s: s, sb: sb, eid: eid, procs: procs}
	switch {
	case r.URL.Path == "/files" && r.Method == http.MethodGet:
		c.download(w, r)
	case r.URL.Path == "/files" && r.Method == http.MethodPost:
		c.upload(w, r)
	case r.URL.Path == "/envs" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, sb.envVars)
	case r.URL.Path == "/init" && r.Method == http.MethodPost:
		w.WriteHeader(http.StatusNoContent)
	case r.Method != http.MethodPost:
		writeJSON(w, http.StatusNotFound, e2b.APIError{Code: 404, Message: "not found"})
	case r.URL.Path == e2b.PathProcessStart:
		c.startStream(w, r)
	case r.URL.Path == e2b.PathProcessConnect:
		c.connectStream(w, r)
	default:
		h, ok := c.unaryHandlers()[r.URL.Path]
		if !ok {
			writeConnectError(w, &e2b.ConnectError{Code: e2b.CodeUnimplemented, Message: r.URL.Path + " is not implemented"})
			return
		}
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != e2b.ContentTypeJSON {
			writeConnectError(w, &e2b.ConnectError{Code: e2b.CodeInvalidArgument, Message: "content type must be application/json"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSON))
		if err != nil {
			writeConnectError(w, &e2b.ConnectError{Code: e2b.CodeInvalidArgument, Message: "read body: " + err.Error()})
			return
		}
		out, err := h(r.Context(), body)
		if err != nil {
			writeConnectError(w, asConnect(err))
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// envdAuthorized checks X-Access-Token, or a /files URL signature.
func (s *Server) envdAuthorized(r *http.Request, sb *sandbox) bool {
	if sb.token == "" {
		return true
	}
	if tok := r.Header.Get("X-Access-Token"); tok != "" {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(sb.token)) == 1
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if r.URL.Path != "/files" || sig == "" {
		return false
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	exp := q.Get("signature_expiration")
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || s.o.Now().Unix() > n {
			return false
		}
	}
	want := FileSignature(q.Get("path"), op, q.Get("username"), sb.token, exp)
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// FileSignature is the v1 signature of a /files URL, as the SDKs compute it:
// "v1_" + unpadded base64 of sha256("path:op:user:token[:expiration]").
func FileSignature(path, op, user, token, expiration string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

func writeConnectError(w http.ResponseWriter, ce *e2b.ConnectError) {
	writeJSON(w, ce.HTTPStatus(), ce)
}

// envdCall is one envd request's view of its sandbox.
type envdCall struct {
	s     *Server
	sb    *sandbox
	eid   string
	procs *procTable
}

// resolve makes an envd path absolute: relative paths are under the user's home.
func resolve(p string) string {
	if p == "" {
		return provider.HomeDir
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = provider.HomeDir + p[1:]
	}
	if !path.IsAbs(p) {
		p = path.Join(provider.HomeDir, p)
	}
	return path.Clean(p)
}

func entry(fi engine.FileInfo) e2b.EntryInfo {
	t := e2b.FileTypeFile
	mode := fs.FileMode(fi.Mode)
	switch {
	case fi.IsDir:
		t = e2b.FileTypeDirectory
	case mode&fs.ModeSymlink != 0:
		t = e2b.FileTypeSymlink
	}
	mt := fi.ModTime.UTC()
	return e2b.EntryInfo{Name: fi.Name, Type: t, Path: fi.Path, Size: e2b.Int64(fi.Size), Mode: uint32(mode.Perm()),
		Permissions: mode.String(), Owner: "user", Group: "user", ModifiedTime: &mt}
}

type unaryHandler func(ctx context.Context, body []byte) (any, error)

func unary[T any](f func(context.Context, T) (any, error)) unaryHandler {
	return func(ctx context.Context, body []byte) (any, error) {
		var in T
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &in); err != nil {
				return nil, &connectErr{e2b.CodeInvalidArgument, "invalid JSON: " + err.Error()}
			}
		}
		return f(ctx, in)
	}
}

func (c envdCall) unaryHandlers() map[string]unaryHandler {
	eng := c.s.o.Engine
	return map[string]unaryHandler{
		e2b.PathProcessList: unary(func(ctx context.Context, _ struct{}) (any, error) {
			return e2b.ListResponse{Processes: c.procs.list()}, nil
		}),
		e2b.PathProcessSendSignal: unary(func(ctx context.Context, in e2b.SendSignalRequest) (any, error) {
			p, err := c.procs.find(in.Process)
			if err != nil {
				return nil, err
			}
			switch in.Signal {
			case e2b.SignalSIGKILL, e2b.SignalSIGTERM:
			default:
				return nil, &connectErr{e2b.CodeInvalidArgument, "unsupported signal " + string(in.Signal)}
			}
			p.kill()
			return struct{}{}, nil
		}),
		e2b.PathProcessSendInput: unary(func(ctx context.Context, in e2b.SendInputRequest) (any, error) {
			p, err := c.procs.find(in.Process)
			if err != nil {
				return nil, err
			}
			if p.stdin == nil {
				return nil, &connectErr{e2b.CodeFailedPrecondition, "process was started without stdin"}
			}
			data := in.Input.Stdin
			if data == nil {
				data = in.Input.PTY
			}
			if _, err := writeCtx(ctx, p.stdin, data); err != nil {
				return nil, &connectErr{e2b.CodeFailedPrecondition, "write stdin: " + err.Error()}
			}
			return struct{}{}, nil
		}),
		e2b.PathProcessCloseStdin: unary(func(ctx context.Context, in e2b.CloseStdinRequest) (any, error) {
			p, err := c.procs.find(in.Process)
			if err != nil {
				return nil, err
			}
			if p.stdin != nil {
				p.stdin.Close()
			}
			return struct{}{}, nil
		}),
		e2b.PathFilesystemStat: unary(func(ctx context.Context, in e2b.PathRequest) (any, error) {
			fi, err := eng.Stat(ctx, c.eid, resolve(in.Path))
			if err != nil {
				return nil, fileErr(in.Path, err)
			}
			e := entry(fi)
			return e2b.EntryResponse{Entry: &e}, nil
		}),
		e2b.PathFilesystemListDir: unary(func(ctx context.Context, in e2b.ListDirRequest) (any, error) {
			depth := int(in.Depth)
			if depth < 1 {
				depth = 1
			}
			if depth > 32 {
				return nil, &connectErr{e2b.CodeInvalidArgument, "depth must be at most 32"}
			}
			dir := resolve(in.Path)
			fi, err := eng.Stat(ctx, c.eid, dir)
			if err != nil {
				return nil, fileErr(in.Path, err)
			}
			if !fi.IsDir {
				return nil, &connectErr{e2b.CodeInvalidArgument, "path " + in.Path + " is not a directory"}
			}
			out := []e2b.EntryInfo{}
			if err := c.walk(ctx, dir, depth, &out); err != nil {
				return nil, fileErr(in.Path, err)
			}
			return e2b.ListDirResponse{Entries: out}, nil
		}),
		e2b.PathFilesystemMakeDir: unary(func(ctx context.Context, in e2b.PathRequest) (any, error) {
			p := resolve(in.Path)
			if fi, err := eng.Stat(ctx, c.eid, p); err == nil {
				if fi.IsDir {
					return nil, &connectErr{e2b.CodeAlreadyExists, "directory " + in.Path + " already exists"}
				}
				return nil, &connectErr{e2b.CodeInvalidArgument, "path " + in.Path + " exists and is not a directory"}
			}
			if err := eng.MkdirAll(ctx, c.eid, p); err != nil {
				return nil, fileErr(in.Path, err)
			}
			fi, err := eng.Stat(ctx, c.eid, p)
			if err != nil {
				return nil, fileErr(in.Path, err)
			}
			e := entry(fi)
			return e2b.EntryResponse{Entry: &e}, nil
		}),
		e2b.PathFilesystemRemove: unary(func(ctx context.Context, in e2b.PathRequest) (any, error) {
			p := resolve(in.Path)
			if _, err := eng.Stat(ctx, c.eid, p); err != nil {
				return nil, fileErr(in.Path, err)
			}
			if err := eng.Remove(ctx, c.eid, p); err != nil {
				return nil, fileErr(in.Path, err)
			}
			return struct{}{}, nil
		}),
	}
}

func (c envdCall) walk(ctx context.Context, dir string, depth int, out *[]e2b.EntryInfo) error {
	if len(*out) > 100000 {
		return &connectErr{e2b.CodeInvalidArgument, "directory listing too large"}
	}
	fis, err := c.s.o.Engine.ListFiles(ctx, c.eid, dir)
	if err != nil {
		return err
	}
	for _, fi := range fis {
		*out = append(*out, entry(fi))
		if fi.IsDir && depth > 1 {
			if err := c.walk(ctx, fi.Path, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// fileErr maps a file operation's error, keeping "not found" a not_found.
func fileErr(p string, err error) error {
	if errors.Is(err, engine.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err) {
		return &connectErr{e2b.CodeNotFound, "path " + p + " does not exist"}
	}
	return err
}

// writeCtx writes to a pipe, giving up when ctx ends (a process that never reads its
// stdin must not hold the request forever).
func writeCtx(ctx context.Context, w io.Writer, b []byte) (int, error) {
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := w.Write(b)
		ch <- res{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (c envdCall) download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("path")
	p := resolve(q)
	eng := c.s.o.Engine
	fi, err := eng.Stat(r.Context(), c.eid, p)
	if err != nil {
		if fileErr(q, err) != err {
			writeJSON(w, http.StatusNotFound, e2b.APIError{Code: 404, Message: "path '" + p + "' does not exist"})
			return
		}
		writeJSON(w, http.StatusInternalServerError, e2b.APIError{Code: 500, Message: "stat " + p})
		return
	}
	if fi.IsDir {
		writeJSON(w, http.StatusBadRequest, e2b.APIError{Code: 400, Message: "path '" + p + "' is a directory"})
		return
	}
	data, err := eng.ReadFile(r.Context(), c.eid, p)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, e2b.APIError{Code: 500, Message: "read " + p})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}

func (c envdCall) upload(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		writeJSON(w, status, e2b.APIError{Code: status, Message: msg})
	}
	body := io.Reader(http.MaxBytesReader(w, r.Body, c.s.o.MaxUpload+1<<20))
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(body)
		if err != nil {
			fail(http.StatusBadRequest, "invalid gzip body")
			return
		}
		defer zr.Close()
		body = zr
	}
	qpath := r.URL.Query().Get("path")
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		fail(http.StatusBadRequest, "missing or invalid content type")
		return
	}
	var written []e2b.FileEntry
	write := func(name string, src io.Reader) bool {
		data, err := io.ReadAll(io.LimitReader(src, c.s.o.MaxUpload+1))
		if err != nil {
			fail(http.StatusBadRequest, "read upload: "+err.Error())
			return false
		}
		if int64(len(data)) > c.s.o.MaxUpload {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("file is larger than %d bytes", c.s.o.MaxUpload))
			return false
		}
		p := resolve(name)
		if fi, err := c.s.o.Engine.Stat(r.Context(), c.eid, p); err == nil && fi.IsDir {
			fail(http.StatusBadRequest, "path '"+p+"' is a directory")
			return false
		}
		if err := c.s.o.Engine.WriteFile(r.Context(), c.eid, p, data, 0o644); err != nil {
			c.s.log.Error("upload", "sandbox_id", c.sb.id, "path", p, "err", err)
			fail(http.StatusInternalServerError, "error writing file '"+p+"'")
			return false
		}
		written = append(written, e2b.FileEntry{Path: p, Name: path.Base(p), Type: "file"})
		return true
	}
	switch ct {
	case "application/octet-stream":
		if qpath == "" {
			fail(http.StatusBadRequest, "path is required for an octet-stream upload")
			return
		}
		if !write(qpath, body) {
			return
		}
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				fail(http.StatusBadRequest, "invalid multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			name := qpath
			if name == "" || len(written) > 0 {
				name = part.FileName()
			}
			if name == "" {
				fail(http.StatusBadRequest, "a file part needs a path or a file name")
				return
			}
			if !write(name, part) {
				return
			}
		}
	default:
		fail(http.StatusBadRequest, "content type must be multipart/form-data or application/octet-stream")
		return
	}
	if len(written) == 0 {
		fail(http.StatusBadRequest, "no file in the upload")
		return
	}
	writeJSON(w, http.StatusOK, written)
}

// readStreamRequest reads the single enveloped request message of a server-streaming
// call.
func readStreamRequest(w http.ResponseWriter, r *http.Request, v any) *e2b.ConnectError {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != e2b.ContentTypeConnectJSON {
		return &e2b.ConnectError{Code: e2b.CodeInvalidArgument, Message: "content type must be application/connect+json"}
	}
	env, err := e2b.ReadEnvelope(http.MaxBytesReader(w, r.Body, maxJSON))
	if err != nil {
		return &e2b.ConnectError{Code: e2b.CodeInvalidArgument, Message: "read request: " + err.Error()}
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		return &e2b.ConnectError{Code: e2b.CodeInvalidArgument, Message: "invalid JSON: " + err.Error()}
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
		st.w.Header().Set("Content-Type", e2b.ContentTypeConnectJSON)
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
}

func (st *stream) send(ev e2b.ProcessEvent) error {
	st.begin()
	b, err := json.Marshal(e2b.StreamResponse{Event: ev})
	if err != nil {
		return err
	}
	if err := e2b.WriteEnvelope(st.w, 0, b); err != nil {
		return err
	}
	return st.rc.Flush()
}

// end writes the end-of-stream envelope, with ce when the call failed.
func (st *stream) end(ce *e2b.ConnectError) {
	st.begin()
	b, _ := json.Marshal(e2b.EndStream{Error: ce})
	_ = e2b.WriteEnvelope(st.w, e2b.FlagEndStream, b)
	_ = st.rc.Flush()
}

func (c envdCall) startStream(w http.ResponseWriter, r *http.Request) {
	st := newStream(w)
	var req e2b.StartRequest
	if ce := readStreamRequest(w, r, &req); ce != nil {
		st.end(ce)
		return
	}
	p, sub, err := c.procs.start(c.s.base, c.s.o.Engine, c.eid, req, &c.s.wg)
	if err != nil {
		st.end(asConnect(err))
		return
	}
	if err := st.send(e2b.ProcessEvent{Start: &e2b.StartEvent{PID: p.pid}}); err != nil {
		p.unsubscribe(sub)
		return
	}
	c.follow(st, r, p, sub)
}

func (c envdCall) connectStream(w http.ResponseWriter, r *http.Request) {
	st := newStream(w)
	var req e2b.ConnectRequest
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
	if err := st.send(e2b.ProcessEvent{Start: &e2b.StartEvent{PID: p.pid}}); err != nil {
		if sub != nil {
			p.unsubscribe(sub)
		}
		return
	}
	if end != nil {
		_ = st.send(e2b.ProcessEvent{End: end})
		st.end(nil)
		return
	}
	c.follow(st, r, p, sub)
}

// follow streams a process's events until it ends, the client goes, or the call's
// Connect-Timeout-Ms passes. The process outlives the stream.
func (c envdCall) follow(st *stream, r *http.Request, p *proc, sub *sub) {
	defer p.unsubscribe(sub)
	var deadline <-chan time.Time
	if ms, err := strconv.ParseInt(r.Header.Get(e2b.HeaderTimeoutMs), 10, 64); err == nil && ms > 0 {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	var keepalive <-chan time.Time
	if sec, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && sec > 0 {
		t := time.NewTicker(time.Duration(sec) * time.Second)
		defer t.Stop()
		keepalive = t.C
	}
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
				st.end(&e2b.ConnectError{Code: "resource_exhausted", Message: "stream fell behind the process output"})
				return
			}
		case <-keepalive:
			if err := st.send(e2b.ProcessEvent{Keepalive: &struct{}{}}); err != nil {
				return
			}
		case <-deadline:
			st.end(&e2b.ConnectError{Code: e2b.CodeDeadlineExceeded, Message: "stream timeout"})
			return
		case <-r.Context().Done():
			return
		}
	}
}
