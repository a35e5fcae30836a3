package logtail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("logtail: follower closed")

// watcherlessPoll is the poll interval when no file-system watcher is available.
const watcherlessPoll = 250 * time.Millisecond

// Follower follows one service's log from where Initial ends. The text it
// returns, concatenated, is exactly the bytes written to the log (invalid UTF-8
// replaced by U+FFFD), across rotations: when <name>.log is renamed to
// <name>.log.1 and a new <name>.log is created, the follower reads the renamed
// file to its end, then the new one from its start (a follower so far behind
// that its file left the chain continues with the oldest rotated file written
// since, and loses only files already deleted). When the file is truncated
// below what was read, reading restarts at its start, so the output written
// after the truncation is delivered whole. A deleted log is waited for and
// read from its start once it is created again.
//
// The 1–3 bytes of a character cut by the end of what has been read are held
// back, on no timer, until the rest arrives, or the file they were read from
// is truncated or replaced (rotation, deletion): then they are delivered as
// U+FFFD, one per byte. The service monitor writes every chunk of output up
// to a character boundary, rotates only there, and replaces an incomplete
// character left when the run's output ends, so in a log it writes a
// character is only ever held until the rest of its write is read.
//
// A Follower is not safe for concurrent use.
type Follower struct {
	d    *Dir
	name string
	wake chan struct{}
	poll *time.Ticker

	file *os.File
	off  int64
	buf  []byte
	text utf8Stream
	// flushed is what a switch of files released of a held character.
	flushed string

	initial string
	closed  bool
}

// Open starts following name's log. Its error matches fs.ErrInvalid (and
// ErrInvalidName) for a bad name and fs.ErrNotExist when the log does not exist.
func (d *Dir) Open(name string) (*Follower, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	file, err := openLog(d.path(name, 0))
	if err != nil {
		return nil, fmt.Errorf("open log of %q: %w", name, err)
	}
	f := &Follower{
		d:    d,
		name: name,
		wake: make(chan struct{}, 1),
		file: file,
		buf:  make([]byte, d.opts.MaxChunk),
	}
	if err := f.readInitial(); err != nil {
		_ = file.Close()
		return nil, err
	}
	interval := d.opts.PollInterval
	if !d.subscribe(f) {
		interval = min(interval, watcherlessPoll)
	}
	f.poll = time.NewTicker(interval)
	return f, nil
}

// openLog opens a log file for reading; O_NONBLOCK keeps a FIFO planted in the
// folder from blocking the open, and only regular files are accepted.
func openLog(path string) (*os.File, error) {
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		_ = file.Close()
		return nil, fmt.Errorf("%s: not a regular file: %w", path, fs.ErrNotExist)
	}
	return file, nil
}

// readInitial reads the last InitialBytes of the log, reaching back into
// <name>.log.1 when the current file is shorter, starting at a character boundary.
func (f *Follower) readInitial() error {
	fi, err := f.file.Stat()
	if err != nil {
		return fmt.Errorf("stat log of %q: %w", f.name, err)
	}
	want := int64(f.d.opts.InitialBytes)
	start := max(0, fi.Size()-want)
	b := make([]byte, fi.Size()-start)
	n, err := f.file.ReadAt(b, start)
	if err != nil && err != io.EOF {
		return fmt.Errorf("read log of %q: %w", f.name, err)
	}
	b = b[:n]
	f.off = start + int64(n)
	atStart := start == 0
	if atStart && int64(n) < want {
		if prev, err := openLog(f.d.path(f.name, 1)); err == nil {
			if pfi, err := prev.Stat(); err == nil && !os.SameFile(pfi, fi) {
				pstart := max(0, pfi.Size()-(want-int64(n)))
				pb := make([]byte, pfi.Size()-pstart)
				if k, err := prev.ReadAt(pb, pstart); err == nil || err == io.EOF {
					b = append(pb[:k], b...)
					atStart = pstart == 0
				}
			}
			_ = prev.Close()
		}
	}
	if !atStart {
		// The window may begin inside a character: skip its continuation bytes.
		for i := 0; i < utf8MaxLen-1 && len(b) > 0 && isContinuation(b[0]); i++ {
			b = b[1:]
		}
	}
	f.initial = f.decode(b)
	return nil
}

// Initial returns the last bytes of the log when it was opened (at most
// Options.InitialBytes), as valid UTF-8 that starts at a character boundary.
func (f *Follower) Initial() string { return f.initial }

// Next returns the next text written to the log, at most about
// Options.MaxChunk bytes, never ending inside a character. It blocks until
// there is some, until ctx ends (returning ctx.Err()), or until reading fails.
func (f *Follower) Next(ctx context.Context) (string, error) {
	if f.closed {
		return "", ErrClosed
	}
	for {
		s, err := f.step()
		if err != nil || s != "" {
			return s, err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-f.wake:
		case <-f.poll.C:
		}
	}
}

// step reads what is available, following truncation and rotation. It returns
// "" when there is nothing new yet.
func (f *Follower) step() (string, error) {
	for {
		n, err := f.file.ReadAt(f.buf, f.off)
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("read log of %q: %w", f.name, err)
		}
		if n > 0 {
			f.off += int64(n)
			if s := f.decode(f.buf[:n]); s != "" {
				return s, nil
			}
			continue
		}
		fi, err := f.file.Stat()
		if err != nil {
			return "", fmt.Errorf("stat log of %q: %w", f.name, err)
		}
		if fi.Size() < f.off {
			// Truncated: what the file holds now was written after the
			// truncation, and no longer completes a held character.
			f.off = 0
			if f.text.held() {
				return f.text.flush(), nil
			}
			continue
		}
		moved, err := f.follow(fi)
		if err != nil {
			return "", err
		}
		if s := f.flushed; s != "" {
			f.flushed = ""
			return s, nil
		}
		if !moved {
			return "", nil
		}
	}
}

// follow checks, at the end of the open file cur, whether a newer log file
// succeeds it, and switches to it once cur is read to its end. It reports
// whether anything changed that is worth reading again.
func (f *Follower) follow(cur os.FileInfo) (bool, error) {
	for range 3 {
		if s0 := statOrNil(f.d.path(f.name, 0)); s0 != nil && os.SameFile(cur, s0) {
			return false, nil
		}
		// Rotated (ours is now .1 or .2; its successor is one generation newer)
		// or deleted (the successor is whatever <name>.log is created next).
		succ, pred := 0, -1
		s1, s2 := statOrNil(f.d.path(f.name, 1)), statOrNil(f.d.path(f.name, 2))
		switch {
		case s1 != nil && os.SameFile(cur, s1):
			succ, pred = 0, 1
		case s2 != nil && os.SameFile(cur, s2):
			succ, pred = 1, 2
		case newer(s2, cur):
			// Ours rotated out of the chain: its successors are the rotated
			// files written since, oldest first. Older ones predate a deletion.
			succ = 2
		case newer(s1, cur):
			succ = 1
		}
		next, err := openLog(f.d.path(f.name, succ))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // mid-rotation or deleted: wait for the new file
		}
		if err != nil {
			return false, fmt.Errorf("open rotated log of %q: %w", f.name, err)
		}
		nfi, err := next.Stat()
		if err != nil || os.SameFile(nfi, cur) {
			_ = next.Close()
			return false, nil
		}
		if pred > 0 {
			// Our file still at generation pred proves no rotation happened since
			// we looked, so next is really its successor. Otherwise look again.
			if p := statOrNil(f.d.path(f.name, pred)); p == nil || !os.SameFile(cur, p) {
				_ = next.Close()
				continue
			}
		}
		// The writer never writes to a file once its successor exists; read
		// what it wrote before that, then switch.
		if fi, err := f.file.Stat(); err == nil && fi.Size() > f.off {
			_ = next.Close()
			return true, nil
		}
		_ = f.file.Close()
		f.file, f.off = next, 0
		// A character cut at the end of the old file is not continued by the new one.
		f.flushed = f.text.flush()
		return true, nil
	}
	return false, nil
}

// newer reports whether fi exists and was last written no earlier than cur
// (timestamps are coarse, so "no earlier" rather than "later").
func newer(fi, cur os.FileInfo) bool {
	return fi != nil && !os.SameFile(fi, cur) && !fi.ModTime().Before(cur.ModTime())
}

// decode passes raw through the UTF-8 stream.
func (f *Follower) decode(raw []byte) string { return f.text.push(raw) }

// notify wakes a waiting Next; wake-ups coalesce.
func (f *Follower) notify() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Close releases the follower's file and its share of the watcher. It is
// idempotent.
func (f *Follower) Close() {
	if f.closed {
		return
	}
	f.closed = true
	f.d.unsubscribe(f)
	f.poll.Stop()
	_ = f.file.Close()
}
