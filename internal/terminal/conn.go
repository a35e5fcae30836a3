package terminal

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// maxFrame is the most output sent in one message.
const maxFrame = 64 << 10

// batchWindow is how long output that follows a frame may wait to be sent
// with more (see writeClient).
const batchWindow = 2 * time.Millisecond

// outputHeader is the v2 output frame header: type and offset.
const outputHeader = 1 + 8

// serve pumps one connection: client frames to the shell, ring to the
// client, pings. It returns when the connection ends or the shell is gone.
func (m *Manager) serve(ctx context.Context, c Conn, s *session, v *viewer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var writeErr error
	wg.Go(func() {
		defer cancel()
		m.readClient(ctx, c, s, v)
	})
	wg.Go(func() {
		defer cancel()
		writeErr = m.writeClient(ctx, c, s, v)
	})
	wg.Go(func() {
		defer cancel()
		m.pingClient(ctx, c)
	})
	wg.Wait()
	return writeErr
}

// readClient applies client frames until the connection fails.
func (m *Manager) readClient(ctx context.Context, c Conn, s *session, v *viewer) {
	for {
		binary, p, err := c.Read(ctx)
		if err != nil {
			return
		}
		if !v.v2 {
			if cols, rows, ok := v1Resize(p); ok {
				s.resize(cols, rows)
				continue
			}
			s.input(ctx, p)
			continue
		}
		if !binary {
			_ = c.Close(closeUnsupported, "protocol v2 takes binary frames")
			return
		}
		f, err := parseClientFrame(p)
		if err != nil {
			_ = c.Close(closeProtocolError, closeReason(err.Error()))
			return
		}
		switch f.typ {
		case FrameInput:
			// Input the client produced while its terminal was still
			// processing the replay answers replayed queries (DA, DSR, OSC
			// colors…): the shell never asked, so it must not be typed.
			if int64(f.offset) < v.live {
				continue
			}
			s.input(ctx, f.data)
		case FrameResize:
			s.resize(f.cols, f.rows)
		}
	}
}

// writeClient sends the ring from the viewer's offset on. A viewer that was
// left behind (see publish) skips to the oldest byte kept (v2 clients see the
// jump in the frame offsets); it never holds more than one frame of memory.
func (m *Manager) writeClient(ctx context.Context, c Conn, s *session, v *viewer) error {
	buf := make([]byte, outputHeader+maxFrame)
	write := func(binary bool, p []byte) error {
		wctx, cancel := context.WithTimeout(ctx, m.opts.WriteTimeout)
		defer cancel()
		return c.Write(wctx, binary, p)
	}
	if v.v2 {
		ready := []byte{FrameReady, 0}
		if v.resumed {
			ready[1] = ReadyResumed
		}
		ready = binary.BigEndian.AppendUint32(ready, uint32(s.pid))
		ready = binary.BigEndian.AppendUint64(ready, uint64(v.start))
		ready = binary.BigEndian.AppendUint64(ready, uint64(v.live))
		if err := write(true, ready); err != nil {
			return err
		}
	}
	// Batching: output that follows a large frame within batchWindow waits
	// out the window (unless a full frame is ready), so a flood goes out in
	// large frames, with a fraction of the wakeups and writes; after a small
	// frame (an echo, a prompt) output goes out at once.
	var lastSend time.Time
	lastSize := 0
	batch := time.NewTimer(time.Hour)
	batch.Stop()
	defer batch.Stop()
	for {
		finished := false
		select {
		case <-s.done:
			finished = true
		default:
		}
		if d := batchWindow - time.Since(lastSend); !finished && lastSize >= bulkRead && d > 0 {
			s.mu.Lock()
			ready := s.ring.end - v.pos
			s.mu.Unlock()
			if ready < maxFrame {
				batch.Reset(d)
				select {
				case <-batch.C:
				case <-s.done:
				case <-ctx.Done():
					return nil
				}
			}
		}
		s.mu.Lock()
		if v.pos < s.ring.start() {
			v.pos = s.ring.boundary(s.ring.start())
		}
		off := v.pos
		n := s.ring.read(buf[outputHeader:], off)
		s.mu.Unlock()
		if n > 0 {
			var err error
			if v.v2 {
				buf[0] = FrameOutput
				binary.BigEndian.PutUint64(buf[1:], uint64(off))
				err = write(true, buf[:outputHeader+n])
			} else {
				p := buf[outputHeader : outputHeader+n]
				if !utf8.Valid(p) {
					// Browsers fail a connection on an invalid text frame.
					p = bytes.ToValidUTF8(p, []byte("\uFFFD"))
				}
				err = write(false, p)
			}
			if err != nil {
				return err
			}
			lastSend, lastSize = time.Now(), n
			s.mu.Lock()
			v.pos = off + int64(n)
			v.blockedSince = time.Time{}
			if v.lagging && v.pos == s.ring.end {
				v.lagging = false
			}
			s.mu.Unlock()
			select {
			case s.space <- struct{}{}:
			default:
			}
			continue
		}
		if finished {
			return m.sendExit(ctx, c, s, v)
		}
		select {
		case <-v.wake:
		case <-s.done:
		case <-ctx.Done():
			return nil
		}
	}
}

// sendExit tells the client the shell's exit code and closes the connection.
func (m *Manager) sendExit(ctx context.Context, c Conn, s *session, v *viewer) error {
	s.mu.Lock()
	code := s.exitCode
	s.mu.Unlock()
	if !v.v2 {
		return c.Close(closeNormal, V1ExitReason)
	}
	frame := binary.BigEndian.AppendUint32([]byte{FrameExit}, uint32(int32(code)))
	wctx, cancel := context.WithTimeout(ctx, m.opts.WriteTimeout)
	err := c.Write(wctx, true, frame)
	cancel()
	if err != nil {
		return err
	}
	return c.Close(closeNormal, ExitReasonPrefix+strconv.Itoa(code))
}

// pingClient pings every PingInterval; a missing pong ends the connection.
func (m *Manager) pingClient(ctx context.Context, c Conn) {
	t := time.NewTicker(m.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, m.opts.PingInterval)
		err := c.Ping(pctx)
		cancel()
		if err != nil {
			return
		}
	}
}
