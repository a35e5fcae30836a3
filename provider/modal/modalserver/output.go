package modalserver

import (
	"context"
	"os"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Output bounds: what one stream may hold in memory.
const (
	// execWindow is what an exec's stream keeps unread before its writer waits.
	execWindow = 8 << 20
	// stdioRing is what a sandbox's entrypoint stream keeps: the most recent bytes.
	stdioRing = 4 << 20
)

// output is one stream of a process, addressed by offset as the SDKs read it (a reader
// that reconnects asks again from the offset it has). It keeps at most max bytes, in
// one of two ways:
//
//   - window (an exec's stdout/stderr, TaskExecStdioRead): a read at offset off drops
//     what lies before off (the reader has it), and a writer that would hold more than
//     max waits for a reader, as on a pipe. Nothing is lost; a program whose output
//     nobody reads stalls once max bytes wait, and memory stays at max.
//   - ring (a sandbox's entrypoint, SandboxStdioReadV2): a writer never waits; past max
//     the oldest bytes go, and a reader behind them resumes at the oldest kept byte
//     (Modal's startingOffset: "only the most recent portion of output is retained").
type output struct {
	mu   sync.Mutex
	ring bool
	max  int
	base uint64 // offset of data[0]
	data []byte
	// closed: the writer is done (EOF after the data). discard: later writes are
	// dropped (the process is being killed or nobody will read it any more).
	closed, discard bool
	wake            chan struct{} // closed and replaced on every change
}

func newOutput(max int, ring bool) *output {
	return &output{max: max, ring: ring, wake: make(chan struct{})}
}

func (o *output) signalLocked() {
	close(o.wake)
	o.wake = make(chan struct{})
}

func (o *output) Write(p []byte) (int, error) {
	total := len(p)
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(p) > 0 {
		switch {
		case o.closed:
			return total - len(p), os.ErrClosed
		case o.discard:
			return total, nil
		case o.ring:
			o.data = append(o.data, p...)
			p = nil
			if over := len(o.data) - o.max; over > 0 {
				o.base += uint64(over)
				o.data = append([]byte(nil), o.data[over:]...)
			}
		default:
			room := o.max - len(o.data)
			if room <= 0 {
				wake := o.wake
				o.mu.Unlock()
				<-wake
				o.mu.Lock()
				continue
			}
			n := min(room, len(p))
			o.data = append(o.data, p[:n]...)
			p = p[n:]
		}
		o.signalLocked()
	}
	return total, nil
}

// close ends the stream: readers get EOF after the data.
func (o *output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		o.signalLocked()
	}
}

// drop makes later writes vanish (and frees a waiting writer), so a process being
// killed, or one whose record is gone, never waits on a reader.
func (o *output) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.discard = true
	o.signalLocked()
}

// held is how many bytes the stream keeps.
func (o *output) held() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.data)
}

// read returns the bytes from off (at most max) and the offset they start at, or waits
// for more; eof is true when the stream is closed and everything was read.
func (o *output) read(ctx context.Context, off uint64, max int) (chunk []byte, start uint64, eof bool, err error) {
	for {
		o.mu.Lock()
		if off < o.base {
			if !o.ring {
				o.mu.Unlock()
				return nil, 0, false, status.Errorf(codes.OutOfRange, "output before offset %d was already read", o.base)
			}
			off = o.base
		}
		end := o.base + uint64(len(o.data))
		if off > end {
			o.mu.Unlock()
			return nil, 0, false, status.Errorf(codes.OutOfRange, "offset %d is past the %d bytes written", off, end)
		}
		if !o.ring && off > o.base {
			// The reader has everything before off: let it go, and let a waiting
			// writer on.
			o.data = o.data[off-o.base:]
			o.base = off
			o.signalLocked()
		}
		if off < end {
			i := off - o.base
			chunk = append([]byte(nil), o.data[i:min(uint64(len(o.data)), i+uint64(max))]...)
			o.mu.Unlock()
			return chunk, off, false, nil
		}
		closed, wake := o.closed, o.wake
		o.mu.Unlock()
		if closed {
			return nil, off, true, nil
		}
		select {
		case <-ctx.Done():
			return nil, off, false, ctx.Err()
		case <-wake:
		}
	}
}
