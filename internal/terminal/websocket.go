package terminal

import (
	"context"

	"github.com/coder/websocket"
)

// Subprotocols returns the WebSocket subprotocols a terminal connection may
// negotiate: SubprotocolV2; a connection that negotiates none speaks v1.
func (m *Manager) Subprotocols() []string { return []string{SubprotocolV2} }

// ReserveWebSocket takes room for one session (Reserve) before a WebSocket
// upgrade. serve runs the accepted connection on it, in the protocol the
// connection negotiated; release gives back a reservation that served
// nothing (it is a no-op after serve). It fails at the cap like Reserve.
func (m *Manager) ReserveWebSocket() (serve func(context.Context, *websocket.Conn) error, release func(), err error) {
	r, err := m.Reserve()
	if err != nil {
		return nil, nil, err
	}
	return r.ServeWebSocket, r.Release, nil
}

// ServeWebSocket serves c, accepted with Subprotocols: v2 when it negotiated
// SubprotocolV2, v1 otherwise.
func (r *Reservation) ServeWebSocket(ctx context.Context, c *websocket.Conn) error {
	c.SetReadLimit(MaxMessage)
	if c.Subprotocol() == SubprotocolV2 {
		return r.ServeV2(ctx, wsConn{c})
	}
	return r.ServeV1(ctx, wsConn{c})
}

// wsConn adapts a coder/websocket connection to Conn.
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
