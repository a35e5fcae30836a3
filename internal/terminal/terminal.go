// Package terminal runs interactive shells on PTYs for the terminal WebSocket
// of the sidecar. internal/api answers the HTTP upgrade and hands the accepted
// WebSocket to ReserveWebSocket's serve (websocket.go), which speaks the
// terminal protocols over it; the sessions themselves only see a Conn.
//
// Protocol v1 is the old sidecar's: text frames both ways, one shell per
// connection, killed when the connection ends. Protocol v2 (SubprotocolV2)
// uses binary frames, names its session, survives a dropped connection for a
// grace period and lets several viewers attach. In both, one goroutine reads
// the PTY into a ring buffer and every viewer sends from the ring at its own
// offset, so memory is the ring plus one frame per viewer whatever the
// output rate. Output waits for a viewer that keeps making progress (flow
// control reaches the program through the PTY); a viewer that stalls for
// StallTimeout is left behind and skips ahead, so it can neither stall the
// PTY nor the other viewers for longer than that.
package terminal

import (
	"github.com/proliferate-ai/sandbox-mcp/rules"

	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// Conn is one WebSocket connection as the terminal uses it.
type Conn interface {
	// Read returns the next message; binary is false for a text frame.
	Read(ctx context.Context) (binary bool, p []byte, err error)
	// Write sends one message.
	Write(ctx context.Context, binary bool, p []byte) error
	// Ping sends a ping and waits for the pong.
	Ping(ctx context.Context) error
	// Close sends a close frame with code and reason and closes the connection.
	Close(code int, reason string) error
}

// Options configures a Manager.
type Options struct {
	// Dir is the working directory of every shell (the workspace). Required.
	Dir string
	// Command is the shell and its arguments; default ["bash"].
	Command []string
	// Env is the shell's environment; default the sidecar's. TERM is always
	// set to xterm-256color.
	Env []string
	// Grace is how long a v2 session with no viewer lives on; default 5 minutes.
	Grace time.Duration
	// KillGrace is how long processes get after SIGHUP before SIGKILL; default 500ms.
	KillGrace time.Duration
	// RingSize is the replay buffer of each session in bytes; default 256 KiB,
	// at least 64 KiB.
	RingSize int
	// PingInterval is how often every connection is pinged; default 30s. A
	// connection that does not answer within the interval is dropped.
	PingInterval time.Duration
	// WriteTimeout bounds one write to a viewer; a viewer that takes longer is
	// dropped (a v2 viewer may reconnect and resume). Default 30s.
	WriteTimeout time.Duration
	// StallTimeout is how long output waits for a viewer that makes no
	// progress before leaving it behind; default 1s.
	StallTimeout time.Duration
	// InitTimeout bounds the wait for the v2 init frame; default 10s.
	InitTimeout time.Duration
	// MaxSessions caps the live sessions (v1 and v2, detached v2 sessions
	// included); default DefaultMaxSessions. Past it Reserve fails with
	// ErrTooManySessions, so a client cannot fill the sandbox with shells.
	MaxSessions int
	// Logger is required.
	Logger *slog.Logger
}

// Manager owns every terminal session.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	// reserved counts reservations not yet turned into a session.
	reserved int
	closed   bool
	wg       sync.WaitGroup
}

// New checks opts and returns a Manager.
func New(opts Options) (*Manager, error) {
	if opts.Logger == nil {
		return nil, errors.New("terminal: Logger is required")
	}
	if opts.Dir == "" {
		return nil, errors.New("terminal: Dir is required")
	}
	if fi, err := os.Stat(opts.Dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("terminal: workspace %q is not a directory", opts.Dir)
	}
	if len(opts.Command) == 0 {
		opts.Command = []string{"bash"}
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	opts.Env = append(slices.DeleteFunc(slices.Clone(opts.Env), func(s string) bool {
		return strings.HasPrefix(s, "TERM=")
	}), "TERM=xterm-256color")
	if opts.Grace <= 0 {
		opts.Grace = 5 * time.Minute
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = 500 * time.Millisecond
	}
	if opts.RingSize == 0 {
		opts.RingSize = 256 << 10
	}
	if opts.RingSize < 64<<10 {
		return nil, fmt.Errorf("terminal: RingSize %d is below 64 KiB", opts.RingSize)
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 30 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = time.Second
	}
	if opts.InitTimeout <= 0 {
		opts.InitTimeout = 10 * time.Second
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxSessions < 0 {
		return nil, fmt.Errorf("terminal: MaxSessions %d is negative", opts.MaxSessions)
	}
	return &Manager{
		opts:     opts,
		log:      opts.Logger.With("component", "terminal"),
		sessions: make(map[string]*session),
	}, nil
}

// DefaultMaxSessions is the default cap on live sessions.
const DefaultMaxSessions = rules.DefaultMaxTerminals

var errClosed = errors.New("terminal manager is closed")

// ErrTooManySessions is the error of Reserve at the session cap.
var ErrTooManySessions = errors.New("too many terminal sessions")

// ErrClosed is the error of Reserve after Close.
var ErrClosed = errClosed

// Reservation is room for one session, taken before a connection is
// accepted so that a client over the cap is refused before any upgrade.
// Serving a connection turns it into the session (or gives it back when a
// v2 connection resumes an existing one); Release gives back an unused one.
type Reservation struct {
	m    *Manager
	used bool // guarded by m.mu
}

// Reserve takes room for one more session. At MaxSessions sessions (live,
// detached or being set up) it ends the v2 session that has been detached
// the longest to make room (shed.go); when every session has a viewer it
// fails with ErrTooManySessions.
func (m *Manager) Reserve() (*Reservation, error) {
	for range maxShedAttempts {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, errClosed
		}
		if len(m.sessions)+m.reserved < m.opts.MaxSessions {
			m.reserved++
			m.mu.Unlock()
			return &Reservation{m: m}, nil
		}
		victim := m.longestDetachedLocked()
		m.mu.Unlock()
		if victim == nil {
			break
		}
		if !m.shed(victim) {
			break
		}
	}
	return nil, fmt.Errorf("%w: the limit is %d and every session has a viewer; end a session (exit its shell) and retry", ErrTooManySessions, m.opts.MaxSessions)
}

// refuse closes a connection that got no reservation.
func (m *Manager) refuse(c Conn, err error) {
	code := closeTryAgainLater
	if errors.Is(err, errClosed) {
		code = closeGoingAway
	}
	_ = c.Close(code, closeReason(err.Error()))
}

// Release gives the room back unless a session took it; it may be called
// more than once.
func (r *Reservation) Release() {
	r.m.mu.Lock()
	r.useLocked()
	r.m.mu.Unlock()
}

func (r *Reservation) useLocked() {
	if !r.used {
		r.used = true
		r.m.reserved--
	}
}

// ServeV1 is Manager.ServeV1 in the reserved room.
func (r *Reservation) ServeV1(ctx context.Context, c Conn) error { return r.m.serveV1(ctx, c, r) }

// ServeV2 is Manager.ServeV2 in the reserved room.
func (r *Reservation) ServeV2(ctx context.Context, c Conn) error { return r.m.serveV2(ctx, c, r) }

// Close kills every session and waits until their shells are reaped.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.kill("shutdown")
	}
	m.wg.Wait()
	return nil
}

// Sessions lists the live sessions, oldest first.
func (m *Manager) Sessions() []apitype.TerminalSession {
	m.mu.Lock()
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	out := make([]apitype.TerminalSession, 0, len(all))
	for _, s := range all {
		out = append(out, s.info())
	}
	slices.SortFunc(out, func(a, b apitype.TerminalSession) int {
		if a.CreatedAt != b.CreatedAt {
			return int(a.CreatedAt - b.CreatedAt)
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// ServeV1 runs a protocol v1 connection: a fresh 80×24 shell that lives as
// long as the connection. It returns when the connection is over and the
// shell is gone.
func (m *Manager) ServeV1(ctx context.Context, c Conn) error {
	r, err := m.Reserve()
	if err != nil {
		m.refuse(c, err)
		return err
	}
	return r.ServeV1(ctx, c)
}

func (m *Manager) serveV1(ctx context.Context, c Conn, r *Reservation) error {
	defer r.Release()
	id := "v1-" + randomID()
	s, err := m.spawn(id, 80, 24, false, r)
	if err != nil {
		_ = c.Close(closeInternalError, "spawn shell")
		return err
	}
	v := s.attach(0, false)
	err = m.serve(ctx, c, s, v)
	s.detach(v)
	s.kill("client gone")
	<-s.done
	return err
}

// ServeV2 runs a protocol v2 connection: it reads the init frame, attaches to
// the named session (spawning it at the requested size if it does not exist)
// and serves until the connection ends or the shell exits.
func (m *Manager) ServeV2(ctx context.Context, c Conn) error {
	r, err := m.Reserve()
	if err != nil {
		m.refuse(c, err)
		return err
	}
	return r.ServeV2(ctx, c)
}

func (m *Manager) serveV2(ctx context.Context, c Conn, r *Reservation) error {
	defer r.Release()
	ictx, cancel := context.WithTimeout(ctx, m.opts.InitTimeout)
	binary, p, err := c.Read(ictx)
	cancel()
	if err != nil {
		_ = c.Close(closeProtocolError, "no init frame")
		return fmt.Errorf("read init frame: %w", err)
	}
	if !binary {
		_ = c.Close(closeUnsupported, "protocol v2 takes binary frames")
		return errors.New("read init frame: text frame")
	}
	in, err := ParseInit(p)
	if err != nil {
		_ = c.Close(closeProtocolError, closeReason(err.Error()))
		return err
	}
	s, resumed, err := m.session(in, r)
	if err != nil {
		code := closeInternalError
		if errors.Is(err, errClosed) {
			code = closeGoingAway
		}
		_ = c.Close(code, "spawn shell")
		return err
	}
	v := s.attach(int64(in.Offset), true)
	v.resumed = resumed
	err = m.serve(ctx, c, s, v)
	s.detach(v)
	return err
}

// session returns the live session in.Session or spawns it.
func (m *Manager) session(in Init, r *Reservation) (s *session, resumed bool, err error) {
	m.mu.Lock()
	s, ok := m.sessions[in.Session]
	m.mu.Unlock()
	if ok {
		select {
		case <-s.killed:
			// Ending (grace expired, or the shell exited): its id is free
			// again as soon as it is gone.
			<-s.done
		case <-s.exiting:
			<-s.done
		default:
			// A resume takes no new room.
			r.Release()
			return s, true, nil
		}
	}
	s, err = m.spawn(in.Session, in.Cols, in.Rows, true, r)
	if errors.Is(err, errExists) {
		return m.session(in, r)
	}
	return s, false, err
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
