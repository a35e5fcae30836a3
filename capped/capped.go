// Package capped bounds what a writer keeps or passes on: Buffer keeps the
// first bytes of an output that may be endless (a command's stdout or
// stderr), Writer passes bytes on until a limit and fails past it (a bundle
// or a push that may not exceed a size). The git leaf of the sidecar
// (internal/gitrepo) and the host side (provider/local, provider/e2b,
// provider/gitpush) use them.
package capped

import (
	"bytes"
	"errors"
	"io"
	"sync"
)

// Buffer keeps the first Max bytes written to it and discards the rest; every
// Write succeeds, so the writer (a process) never stops on it. It is safe for
// concurrent use (stdout and stderr may share one).
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write keeps what fits and reports all of p written.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.Max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// String is what was kept.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is how many bytes were kept.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// ErrLimit is the error of a Write past a Writer's limit.
var ErrLimit = errors.New("size limit reached")

// Writer passes at most Left bytes to W; a Write that would go past it
// writes nothing, sets Over and fails with ErrLimit.
type Writer struct {
	W    io.Writer
	Left int64
	Over bool
}

// Write passes p on, or fails with ErrLimit when p does not fit.
func (w *Writer) Write(p []byte) (int, error) {
	if int64(len(p)) > w.Left {
		w.Over = true
		return 0, ErrLimit
	}
	n, err := w.W.Write(p)
	w.Left -= int64(n)
	return n, err
}
