package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/terminal"
)

// Terminal runs PTY sessions for WebSocket clients (internal/terminal).
type Terminal interface {
	// Reserve takes room for one more session before the upgrade; it fails
	// with terminal.ErrTooManySessions at the cap. The reservation serves
	// the connection: ServeV1 for one that negotiated no subprotocol, ServeV2
	// for terminal.SubprotocolV2.
	Reserve() (*terminal.Reservation, error)
	// Sessions lists the live sessions.
	Sessions() []apitype.TerminalSession
}

// terminal upgrades GET /api/terminal to a WebSocket. requireAuth has already
// answered 401 without upgrading when the Authorization header is wrong.
func (s *Server) terminal(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Terminal == nil {
		return errNotImplemented
	}
	if !wantsWebSocket(r) {
		return errorf(http.StatusUpgradeRequired, "GET /api/terminal is a WebSocket: send Upgrade: websocket")
	}
	// Refused before the upgrade, so the client reads why.
	res, err := s.opts.Terminal.Reserve()
	if err != nil {
		return &Error{Status: http.StatusServiceUnavailable, Msg: err.Error(), Err: err}
	}
	defer res.Release()
	// After the upgrade the connection is the terminal's: lift the read
	// deadline before the WebSocket library takes it over.
	defer s.stream(w)()
	hw := &handshakeWriter{ResponseWriter: w}
	c, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		Subprotocols: []string{terminal.SubprotocolV2},
		// The gateway proxies browsers whose Origin is the web app, never this
		// host; the bearer token, not the Origin, is what authorizes.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		s.log.Debug("terminal upgrade", "err", err)
		if hw.status != 0 {
			return &Error{Status: hw.status, Msg: strings.TrimSpace(hw.msg.String()), Err: err}
		}
		return nil
	}
	defer c.CloseNow()
	c.SetReadLimit(terminal.MaxMessage)
	ctx, cancel := s.streamContext(r)
	defer cancel()
	conn := wsConn{c}
	if c.Subprotocol() == terminal.SubprotocolV2 {
		err = res.ServeV2(ctx, conn)
	} else {
		err = res.ServeV1(ctx, conn)
	}
	if err != nil {
		s.log.Debug("terminal connection ended", "err", err)
	}
	return nil
}

func (s *Server) terminalSessions(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Terminal == nil {
		return errNotImplemented
	}
	writeJSON(w, http.StatusOK, apitype.TerminalSessionsResponse{Sessions: s.opts.Terminal.Sessions()})
	return nil
}

// wsConn adapts a coder/websocket connection to terminal.Conn.
type wsConn struct{ c *websocket.Conn }

func (w wsConn) Read(ctx context.Context) (bool, []byte, error) {
	typ, p, err := w.c.Read(ctx)
	return typ == websocket.MessageBinary, p, err
}

func (w wsConn) Write(ctx context.Context, binary bool, p []byte) error {
	typ := websocket.MessageText
	if binary {
		typ = websocket.MessageBinary
	}
	return w.c.Write(ctx, typ, p)
}

func (w wsConn) Ping(ctx context.Context) error { return w.c.Ping(ctx) }

func (w wsConn) Close(code int, reason string) error {
	return w.c.Close(websocket.StatusCode(code), reason)
}

// wantsWebSocket reports whether r asks for a WebSocket upgrade, so a plain
// GET gets a JSON error instead of the WebSocket library's text one.
func wantsWebSocket(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}

// handshakeWriter holds back the error answer the WebSocket library writes
// as plain text, so the handler answers it as the API's JSON error instead.
type handshakeWriter struct {
	http.ResponseWriter
	status int
	msg    strings.Builder
}

// Unwrap lets the library reach the connection to hijack it.
func (h *handshakeWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (h *handshakeWriter) WriteHeader(code int) {
	if code >= http.StatusBadRequest {
		h.status = code
		return
	}
	h.ResponseWriter.WriteHeader(code)
}

func (h *handshakeWriter) Write(p []byte) (int, error) {
	if h.status != 0 {
		return h.msg.Write(p)
	}
	return h.ResponseWriter.Write(p)
}
