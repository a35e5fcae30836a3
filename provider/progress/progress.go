// Package progress shows long work (a base image built with mmdebstrap, an
// image build's steps, a registry pull, a dependency snapshot) to the person
// waiting for it. cmd/sandboxctl makes one Reporter per long command and hands
// it to the operation as the io.Writer its progress lines go to, or calls Step
// itself at the operation's step boundaries.
//
// On a terminal a Reporter keeps one line: a spinner, the elapsed time, the
// step number and the latest step, rewritten in place every Interval, so a
// silent step still shows that time passes; Update changes the text of the
// step under way (a layer's bytes so far) between steps. Anywhere else (a
// pipe, a file, a CI log) it writes each step as a plain line, as it came, and
// nothing else: no updates, no escape sequences, no repeated lines.
package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Options configure a Reporter. The zero value reports plain lines.
type Options struct {
	// Terminal draws the one-line bar instead of plain lines; see IsTerminal.
	Terminal bool
	// Width is the terminal's width in columns; the bar is cut to fit. Default:
	// the width of the terminal w is, else 80.
	Width int
	// Interval is how often the bar is redrawn while no step arrives; default 200 ms.
	Interval time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Reporter shows the progress of one long operation. Its methods are safe
// for concurrent use. On a terminal it runs one goroutine, which Done stops.
type Reporter struct {
	w     io.Writer
	o     Options
	start time.Time

	mu      sync.Mutex
	step    string
	n       int    // steps so far
	partial []byte // the start of a line Write has not seen the end of
	frame   int
	drawn   bool // the bar is on screen
	done    bool

	stop     chan struct{}
	finished chan struct{}
}

// New starts a Reporter that writes to w.
func New(w io.Writer, o Options) *Reporter {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Interval <= 0 {
		o.Interval = 200 * time.Millisecond
	}
	if o.Terminal && o.Width <= 0 {
		o.Width = terminalWidth(w)
	}
	r := &Reporter{w: w, o: o, start: o.Now()}
	if o.Terminal {
		r.stop, r.finished = make(chan struct{}), make(chan struct{})
		go r.tick()
	}
	return r
}

// IsTerminal reports whether w is a terminal (a tty), where a Reporter may
// draw its bar.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func terminalWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 80
}

// Step starts the next step, described by a format and its arguments.
func (r *Reporter) Step(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stepLocked(fmt.Sprintf(format, args...))
}

// Update replaces the text of the step under way (a download's bytes so far)
// without starting a new one. The bar shows it at its next redraw; plain lines
// never do, so a log gets the steps only, not a line per chunk.
func (r *Reporter) Update(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || !r.o.Terminal {
		return
	}
	r.step = strings.TrimRight(fmt.Sprintf(format, args...), " \t")
}

// Write takes progress lines from an operation that writes them (an
// io.Writer field such as build.Options.Progress): each complete, non-empty
// line is a step. It never fails.
func (r *Reporter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partial = append(r.partial, p...)
	for {
		i := bytes.IndexAny(r.partial, "\r\n")
		if i < 0 {
			break
		}
		line := string(r.partial[:i])
		r.partial = r.partial[i+1:]
		if strings.TrimSpace(line) != "" {
			r.stepLocked(line)
		}
	}
	// A writer that never ends its line must not grow the buffer forever.
	if len(r.partial) > 64<<10 {
		r.stepLocked(string(r.partial))
		r.partial = nil
	}
	return len(p), nil
}

func (r *Reporter) stepLocked(s string) {
	if r.done {
		return
	}
	r.n++
	r.step = strings.TrimRight(s, " \t")
	if !r.o.Terminal {
		io.WriteString(r.w, r.step+"\n")
		return
	}
	r.drawLocked()
}

// Done ends the report. On a terminal it stops the redraws and replaces the
// bar by one plain line with the last step and the total time; the terminal's
// next line is then free for whatever follows. Calling it again does nothing.
func (r *Reporter) Done() {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return
	}
	if strings.TrimSpace(string(r.partial)) != "" {
		r.stepLocked(string(r.partial))
	}
	r.partial = nil
	r.done = true
	if r.o.Terminal && r.drawn {
		fmt.Fprintf(r.w, "\r\x1b[K%s\n", r.fit(fmt.Sprintf("%s (%d steps, %s)", r.step, r.n, Elapsed(r.o.Now().Sub(r.start)))))
	}
	r.mu.Unlock()
	if r.stop != nil {
		close(r.stop)
		<-r.finished
	}
}

// tick redraws the bar every Interval until Done.
func (r *Reporter) tick() {
	defer close(r.finished)
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			if !r.done && r.n > 0 {
				r.frame++
				r.drawLocked()
			}
			r.mu.Unlock()
		}
	}
}

var spinner = []rune("|/-\\")

// drawLocked rewrites the bar: spinner, elapsed time, step number, step.
func (r *Reporter) drawLocked() {
	bar := fmt.Sprintf("%c %s  step %d  %s", spinner[r.frame%len(spinner)], Elapsed(r.o.Now().Sub(r.start)), r.n, r.step)
	io.WriteString(r.w, "\r\x1b[K"+r.fit(bar))
	r.drawn = true
}

// fit cuts s to the terminal's width (one column left for the cursor) and
// drops control characters, which would move the cursor off the bar.
func (r *Reporter) fit(s string) string {
	limit := r.o.Width - 1
	var b strings.Builder
	cols := 0
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == utf8.RuneError {
			continue
		}
		if cols >= limit {
			break
		}
		b.WriteRune(c)
		cols++
	}
	return b.String()
}

// Elapsed formats a duration for a person: 7s, 2m05s, 1h02m.
func Elapsed(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Bytes formats a size for a person: 512 B, 3.2 MB, 1.1 GB (powers of 1000, as
// registries and docker count).
func Bytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTP"[exp])
}
