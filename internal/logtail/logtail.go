// Package logtail reads the service log files of the sidecar's state folder
// (<dir>/<name>.log, rotated to <name>.log.1 and <name>.log.2): it follows a log
// as it grows, through truncation and rotation, and returns its last lines. It
// only reads; the service manager writes. internal/api streams it over SSE;
// it knows nothing of HTTP.
package logtail

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Defaults of Options.
const (
	DefaultInitialBytes = 10000
	DefaultMaxChunk     = 32 << 10
	DefaultPollInterval = time.Second
	// MaxTailBytes bounds how far back Tail reads.
	MaxTailBytes = 4 << 20
)

// Options configures a Dir.
type Options struct {
	// Dir is the folder of the log files; it need not exist yet.
	Dir string
	// Logger receives warnings (watcher failures); nil discards them.
	Logger *slog.Logger
	// InitialBytes is how much of the end of the log Follower.Initial returns.
	InitialBytes int
	// MaxChunk bounds the bytes read for one Follower.Next result.
	MaxChunk int
	// PollInterval is the safety-net re-check of a followed file when no
	// file-system event arrives (missed events, watcher unavailable).
	PollInterval time.Duration
}

// Dir reads the logs of one folder. It shares one file-system watcher among
// all its followers; the watcher runs only while at least one follower is open.
type Dir struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	subs    map[string]map[*Follower]struct{}
	nsubs   int
	watcher *fsnotify.Watcher
	stopped chan struct{} // closed when the watcher's loop has returned
}

// ErrInvalidName matches (errors.Is) the error for a name that is not a
// file-name-safe service name; so does fs.ErrInvalid.
var ErrInvalidName = rules.ErrInvalidName

// New returns a Dir reading the logs in opts.Dir.
func New(opts Options) (*Dir, error) {
	if opts.Dir == "" {
		return nil, errors.New("logtail: Dir is required")
	}
	if opts.InitialBytes <= 0 {
		opts.InitialBytes = DefaultInitialBytes
	}
	if opts.MaxChunk <= 0 {
		opts.MaxChunk = DefaultMaxChunk
	}
	if opts.MaxChunk < utf8MaxLen {
		opts.MaxChunk = utf8MaxLen
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Dir{
		opts: opts,
		log:  log.With("component", "logtail"),
		subs: map[string]map[*Follower]struct{}{},
	}, nil
}

// ValidName reports whether name is a file-name-safe service name: letters,
// digits, '.', '_' and '-', at most 64 bytes, not "." or "..".
func ValidName(name string) bool { return rules.ValidName(name) }

// checkName refuses a name as rules.ValidateName does, with its message.
func checkName(name string) error {
	if err := rules.ValidateName(name); err != nil {
		return nameError{err}
	}
	return nil
}

// nameError is rules.ValidateName's refusal (so ErrInvalidName) that also
// matches fs.ErrInvalid, which the API answers with a 400.
type nameError struct{ err error }

func (e nameError) Error() string        { return e.err.Error() }
func (e nameError) Unwrap() error        { return e.err }
func (e nameError) Is(target error) bool { return target == fs.ErrInvalid }

// path returns the path of name's log file: generation 0 is <name>.log,
// 1 and 2 are its rotated predecessors. name must be valid.
func (d *Dir) path(name string, gen int) string {
	p := filepath.Join(d.opts.Dir, name+".log")
	if gen > 0 {
		p += fmt.Sprintf(".%d", gen)
	}
	return p
}

// logName returns the service name a file of the folder belongs to, or "".
func logName(base string) string {
	base = strings.TrimSuffix(strings.TrimSuffix(base, ".1"), ".2")
	name, ok := strings.CutSuffix(base, ".log")
	if !ok {
		return ""
	}
	return name
}

// subscribe registers f for wake-ups on its files and starts the watcher if it
// is the first follower. It reports whether file-system events will arrive.
func (d *Dir) subscribe(f *Follower) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.subs[f.name]
	if m == nil {
		m = map[*Follower]struct{}{}
		d.subs[f.name] = m
	}
	m[f] = struct{}{}
	d.nsubs++
	if d.watcher != nil {
		// Re-adding is a no-op for a live watch and restores one lost when the
		// folder was removed and created again.
		_ = d.watcher.Add(d.opts.Dir)
		return true
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		d.log.Warn("file watcher unavailable; polling logs", "err", err)
		return false
	}
	if err := w.Add(d.opts.Dir); err != nil {
		_ = w.Close()
		d.log.Warn("watch log folder; polling logs", "dir", d.opts.Dir, "err", err)
		return false
	}
	d.watcher = w
	d.stopped = make(chan struct{})
	go d.loop(w, d.stopped)
	return true
}

// unsubscribe removes f and stops the watcher after the last follower, waiting
// for its goroutine to end.
func (d *Dir) unsubscribe(f *Follower) {
	d.mu.Lock()
	m := d.subs[f.name]
	if _, ok := m[f]; !ok {
		d.mu.Unlock()
		return
	}
	delete(m, f)
	if len(m) == 0 {
		delete(d.subs, f.name)
	}
	d.nsubs--
	var w *fsnotify.Watcher
	var stopped chan struct{}
	if d.nsubs == 0 && d.watcher != nil {
		w, stopped = d.watcher, d.stopped
		d.watcher, d.stopped = nil, nil
	}
	d.mu.Unlock()
	if w != nil {
		_ = w.Close()
		<-stopped
	}
}

// loop dispatches the watcher's events to the followers of the file's service.
func (d *Dir) loop(w *fsnotify.Watcher, stopped chan struct{}) {
	defer close(stopped)
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			name := logName(filepath.Base(ev.Name))
			if name == "" {
				continue
			}
			d.mu.Lock()
			for f := range d.subs[name] {
				f.notify()
			}
			d.mu.Unlock()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// An overflow loses events: wake everyone to re-check.
			d.log.Warn("file watcher error", "err", err)
			d.mu.Lock()
			for _, m := range d.subs {
				for f := range m {
					f.notify()
				}
			}
			d.mu.Unlock()
		}
	}
}

// Follow opens name's log for a consumer that declares its own interface: it
// returns Initial, Next and Close of the Follower Open returns.
func (d *Dir) Follow(name string) (initial string, next func(context.Context) (string, error), stop func(), err error) {
	f, err := d.Open(name)
	if err != nil {
		return "", nil, nil, err
	}
	return f.Initial(), f.Next, f.Close, nil
}

func statOrNil(path string) os.FileInfo {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	return fi
}
