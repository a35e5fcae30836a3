package modalserver

// A connection is trusted with the server's time only once a call on it has
// authenticated. Until then it is "pre-auth": it is closed preAuthTimeout after it
// was accepted, whatever it sends, and at most maxPreAuth of them are open at once
// (past that the oldest is closed), so idle or unauthenticated connections can
// neither pile up nor hold descriptors for long. A client that authenticates does
// so on its first call, within milliseconds; one whose connection was closed before
// it made a call dials again on its next.
//
// The server sees each accepted connection through its transport credentials: the
// credentials here do no security handshake (the listener is plaintext, as Modal's
// SDKs expect of a local server) but hand every call on a connection a handle to it
// (peer.AuthInfo), which the auth interceptors mark as authenticated.

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

const (
	// preAuthTimeout is how long a connection may stay open without an
	// authenticated call.
	preAuthTimeout = 10 * time.Second
	// maxPreAuth bounds the connections open without an authenticated call.
	maxPreAuth = 64
)

// connGuard tracks the pre-auth connections, oldest first.
type connGuard struct {
	timeout time.Duration
	max     int

	mu      sync.Mutex
	pending []*guardedConn
}

func newConnGuard(timeout time.Duration, maxConns int) *connGuard {
	return &connGuard{timeout: timeout, max: maxConns}
}

// guardedConn is an accepted connection the guard watches until it authenticates.
type guardedConn struct {
	net.Conn
	g     *connGuard
	timer *time.Timer
	// authed and closed are guarded by g.mu.
	authed, closed bool
}

// add starts watching c; it closes the oldest pre-auth connection when there are
// too many.
func (g *connGuard) add(c net.Conn) *guardedConn {
	gc := &guardedConn{Conn: c, g: g}
	g.mu.Lock()
	var evicted *guardedConn
	if len(g.pending) >= g.max {
		evicted = g.pending[0]
		g.pending = g.pending[1:]
	}
	g.pending = append(g.pending, gc)
	gc.timer = time.AfterFunc(g.timeout, gc.expire)
	g.mu.Unlock()
	if evicted != nil {
		evicted.Close()
	}
	return gc
}

// expire closes the connection unless a call on it has authenticated.
func (gc *guardedConn) expire() {
	gc.g.mu.Lock()
	authed := gc.authed
	gc.g.mu.Unlock()
	if !authed {
		gc.Close()
	}
}

// markAuthed keeps the connection open for good.
func (gc *guardedConn) markAuthed() {
	gc.g.mu.Lock()
	defer gc.g.mu.Unlock()
	if gc.authed || gc.closed {
		return
	}
	gc.authed = true
	gc.timer.Stop()
	gc.g.remove(gc)
}

// remove drops gc from the pending list; g.mu is held.
func (g *connGuard) remove(gc *guardedConn) {
	if i := slices.Index(g.pending, gc); i >= 0 {
		g.pending = slices.Delete(g.pending, i, i+1)
	}
}

func (gc *guardedConn) Close() error {
	gc.g.mu.Lock()
	if !gc.closed {
		gc.closed = true
		gc.timer.Stop()
		gc.g.remove(gc)
	}
	gc.g.mu.Unlock()
	return gc.Conn.Close()
}

// pendingCount is the number of open pre-auth connections.
func (g *connGuard) pendingCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// markAuthed marks the connection a call arrived on as authenticated.
func markAuthed(ctx context.Context) {
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(guardInfo); ok {
			info.conn.markAuthed()
		}
	}
}

// guardCreds are plaintext server credentials that put every accepted connection
// under a connGuard.
type guardCreds struct{ g *connGuard }

// guardInfo is the AuthInfo of a guarded connection.
type guardInfo struct {
	credentials.CommonAuthInfo
	conn *guardedConn
}

func (guardInfo) AuthType() string { return "insecure" }

func (c guardCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	gc := c.g.add(conn)
	return gc, guardInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, conn: gc}, nil
}

func (guardCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("modalserver: server-side credentials only")
}

func (guardCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (c guardCreds) Clone() credentials.TransportCredentials { return c }

func (guardCreds) OverrideServerName(string) error { return nil }
