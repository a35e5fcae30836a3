package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Connection limits: the sidecar keeps at most about half its file
// descriptors for HTTP connections, so services' logs, git, terminals and
// state writes always find descriptors, however many connections are held
// open against it.
const (
	minConns = rules.MinConns
	maxConns = rules.MaxConns
)

// connLimit is the connection cap for the current RLIMIT_NOFILE: half the
// soft limit, clamped to [minConns, maxConns]. It is read on every accept,
// so a limit changed while running (prlimit) takes effect at once.
func connLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return maxConns
	}
	return int(min(max(rl.Cur/2, minConns), maxConns))
}

// connLimiter is a listener that holds at most limit() connections open.
// When a new connection would exceed the cap, the oldest connection that has
// not authenticated is closed to make room (an attacker without the token can
// hold connections, but never more than the cap, and never at the expense of
// a client that presented the token); when every connection has
// authenticated, the oldest idle one goes; when none is idle either, the new
// connection is refused. Health checks are unauthenticated and short: they
// get through because the victims are the oldest connections, not the newest.
type connLimiter struct {
	net.Listener
	limit func() int
	log   *slog.Logger

	mu sync.Mutex
	// head is the oldest open connection, tail the newest.
	head, tail *limitedConn
	open       int
	shed       atomic.Int64
	// lastWarn rate-limits the log line about shedding.
	lastWarn time.Time
}

func newConnLimiter(ln net.Listener, limit func() int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, limit: limit, log: log}
}

// Accept returns the next connection, closing an older one first when the
// cap is reached.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors anyway (services use them too): free
				// one held by a stranger; http.Server retries the accept.
				if v := l.victim(false); v != nil {
					l.evict(v, "out of file descriptors")
				}
			}
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l}
		lc.state.Store(int32(http.StateNew))
		limit := l.limit()
		l.mu.Lock()
		var victim *limitedConn
		if l.open >= limit {
			victim = l.victimLocked(true)
			if victim == nil {
				l.mu.Unlock()
				_ = c.Close()
				l.warn("connection refused: every connection is authenticated and busy", limit)
				continue
			}
			// Unlink now so the count is right before the victim's Close runs.
			l.unlinkLocked(victim)
		}
		l.linkLocked(lc)
		l.mu.Unlock()
		if victim != nil {
			l.evict(victim, "connection limit reached")
		}
		return lc, nil
	}
}

// victim picks the oldest unauthenticated connection or, when idleToo, the
// oldest idle one.
func (l *connLimiter) victim(idleToo bool) *limitedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.victimLocked(idleToo)
	if v != nil {
		l.unlinkLocked(v)
	}
	return v
}

func (l *connLimiter) victimLocked(idleToo bool) *limitedConn {
	for c := l.head; c != nil; c = c.next {
		if !c.authenticated.Load() && http.ConnState(c.state.Load()) != http.StateHijacked {
			return c
		}
	}
	if !idleToo {
		return nil
	}
	for c := l.head; c != nil; c = c.next {
		if http.ConnState(c.state.Load()) == http.StateIdle {
			return c
		}
	}
	return nil
}

func (l *connLimiter) evict(c *limitedConn, why string) {
	l.shed.Add(1)
	_ = c.Conn.Close()
	l.warn("closed the oldest connection: "+why, l.limit())
}

// warn logs at most once a second.
func (l *connLimiter) warn(msg string, limit int) {
	l.mu.Lock()
	now := time.Now()
	quiet := now.Sub(l.lastWarn) < time.Second
	if !quiet {
		l.lastWarn = now
	}
	l.mu.Unlock()
	if !quiet {
		l.log.Warn(msg, "limit", limit, "shed_total", l.shed.Load())
	}
}

func (l *connLimiter) linkLocked(c *limitedConn) {
	c.linked = true
	c.prev = l.tail
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.open++
}

func (l *connLimiter) unlinkLocked(c *limitedConn) {
	if !c.linked {
		return
	}
	c.linked = false
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
	l.open--
}

// stats reports the open connections and how many of them authenticated.
func (l *connLimiter) stats() (open, authenticated int, shed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := l.head; c != nil; c = c.next {
		if c.authenticated.Load() {
			authenticated++
		}
	}
	return l.open, authenticated, l.shed.Load()
}

// limitedConn is a connection counted by a connLimiter.
type limitedConn struct {
	net.Conn
	l             *connLimiter
	authenticated atomic.Bool
	state         atomic.Int32 // http.ConnState

	// Guarded by l.mu.
	prev, next *limitedConn
	linked     bool
}

// Close closes the connection and frees its place.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.unlinkLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (c *limitedConn) markAuthenticated() { c.authenticated.Store(true) }

// NetConn is the underlying connection (for http.ResponseController users).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

type limitedConnKey struct{}

// limitedConnFrom is the connection a request came in on, when the server
// runs behind a connLimiter.
func limitedConnFrom(ctx context.Context) *limitedConn {
	c, _ := ctx.Value(limitedConnKey{}).(*limitedConn)
	return c
}

// CloseWrite half-closes a TCP connection; http.Server uses it to let the
// client read an answer before the connection is closed with unread input.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
