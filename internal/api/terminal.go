package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// Terminal runs PTY sessions for WebSocket clients (internal/terminal).
type Terminal interface {
	// Subprotocols are the WebSocket subprotocols a connection may negotiate.
	Subprotocols() []string
	// ReserveWebSocket takes room for one more session before the upgrade;
	// it fails at the cap (503). serve runs the accepted connection, release
	// gives back a reservation that served nothing.
	ReserveWebSocket() (serve func(context.Context, *websocket.Conn) error, release func(), err error)
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
		return fault.New(http.StatusUpgradeRequired, "GET /api/terminal is a WebSocket: send Upgrade: websocket")
	}
	// After the upgrade the connection is the terminal's: openStream lifts
	// the read deadline before the WebSocket library takes it over.
	end, err := s.openStream(w, r)
	if err != nil {
		return err
	}
	defer end()
	// Refused before the upgrade, so the client reads why.
	serve, release, err := s.opts.Terminal.ReserveWebSocket()
	if err != nil {
		return &fault.Error{Status: http.StatusServiceUnavailable, Msg: err.Error(), Err: err}
	}
	defer release()
	hw := &handshakeWriter{ResponseWriter: w}
	c, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		Subprotocols: s.opts.Terminal.Subprotocols(),
		// The gateway proxies browsers whose Origin is the web app, never this
		// host; the bearer token, not the Origin, is what authorizes.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		s.log.Debug("terminal upgrade", "err", err)
		if hw.status != 0 {
			return &fault.Error{Status: hw.status, Msg: strings.TrimSpace(hw.msg.String()), Err: err}
		}
		return nil
	}
	defer c.CloseNow()
	ctx, cancel := s.streamContext(r)
	defer cancel()
	if err := serve(ctx, c); err != nil {
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
