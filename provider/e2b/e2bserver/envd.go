package e2bserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

var errNoFile = fs.ErrNotExist

// envd serves one sandbox's envd API.
func (s *Server) envd(w http.ResponseWriter, r *http.Request, id string) {
	// A sandbox that is gone or paused answers 502, as E2B's proxy does; health needs
	// no token.
	sb, ok := s.lookup(id)
	if !ok {
		writeJSON(w, http.StatusBadGateway, e2bwire.APIError{Code: 502, Message: "sandbox " + id + " not found"})
		return
	}
	if r.URL.Path == "/health" && r.Method == http.MethodGet {
		if st, err := s.state(r.Context(), sb); err != nil || st != e2bwire.StateRunning {
			writeJSON(w, http.StatusBadGateway, e2bwire.APIError{Code: 502, Message: "sandbox " + id + " is not running"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !s.envdAuthorized(r, sb) {
		writeJSON(w, http.StatusUnauthorized, e2bwire.APIError{Code: 401, Message: "invalid access token"})
		return
	}
	st, err := s.state(r.Context(), sb)
	if err != nil || st != e2bwire.StateRunning {
		writeJSON(w, http.StatusBadGateway, e2bwire.APIError{Code: 502, Message: "sandbox " + id + " is not running"})
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
		writeJSON(w, http.StatusNotFound, e2bwire.APIError{Code: 404, Message: "not found"})
	case r.URL.Path == e2bwire.PathProcessStart:
		c.startStream(w, r)
	case r.URL.Path == e2bwire.PathProcessConnect:
		c.connectStream(w, r)
	case r.URL.Path == e2bwire.PathFilesystemWatch:
		c.watchStream(w, r)
	default:
		h, ok := c.unaryHandlers()[r.URL.Path]
		if !ok {
			writeConnectError(w, &e2bwire.ConnectError{Code: e2bwire.CodeUnimplemented, Message: r.URL.Path + " is not served by the local E2B server"})
			return
		}
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != e2bwire.ContentTypeJSON {
			writeConnectError(w, &e2bwire.ConnectError{Code: e2bwire.CodeInvalidArgument, Message: "content type must be application/json"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSON))
		if err != nil {
			writeConnectError(w, &e2bwire.ConnectError{Code: e2bwire.CodeInvalidArgument, Message: "read body: " + err.Error()})
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

// signedFor is the sandbox whose token signed a /files URL that names no sandbox:
// the SDKs' uploadUrl and downloadUrl point at E2B_SANDBOX_URL itself, and only
// the signature tells which sandbox is meant.
func (s *Server) signedFor(r *http.Request) string {
	if r.URL.Path != "/files" || r.URL.Query().Get("signature") == "" || r.Header.Get("X-Access-Token") != "" {
		return ""
	}
	s.mu.Lock()
	sbs := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		if sb.token != "" {
			sbs = append(sbs, sb)
		}
	}
	s.mu.Unlock()
	for _, sb := range sbs {
		if s.envdAuthorized(r, sb) {
			return sb.id
		}
	}
	return ""
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

func writeConnectError(w http.ResponseWriter, ce *e2bwire.ConnectError) {
	writeJSON(w, ce.HTTPStatus(), ce)
}

// fs runs the call's file operations inside its sandbox.
func (c envdCall) fs() sandboxFS { return sandboxFS{eng: c.s.o.Engine, eid: c.eid} }

// envdCall is one envd request's view of its sandbox.
type envdCall struct {
	s     *Server
	sb    *sandbox
	eid   string
	procs *procTable
}
