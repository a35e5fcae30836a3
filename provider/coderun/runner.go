package coderun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Options configure a Runner.
type Options struct {
	// Config is the loaded `[sandbox]` section; it must be enabled.
	Config Config
	// Engine runs the sandboxes. Required.
	Engine engine.Engine
	// Images is the engine's image store (see ImageStore): on an engine with
	// Capabilities.Images, the dependency snapshot is then an image named
	// deps-<configHash> on Config.Image (see chooseBase). Without it, a copy snapshot
	// registered in DataDir/snapshots.json.
	Images ImageStore
	// DataDir holds the search index, the copy snapshots' registry, the sessions' sandbox
	// ids (so a session outlives the process) and, on an engine without volumes,
	// host-directory volumes. Required.
	DataDir string
	// Progress receives progress lines (snapshot builds, docs indexing); nil discards.
	Progress io.Writer
	// Logger receives events; nil discards. Secrets are never logged.
	Logger *slog.Logger
	// HTTPClient fetches docs; nil means one with a 60 s timeout (each docs URL has
	// DocsTimeout besides).
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// IdleTimeout: a session's sandbox unused this long is destroyed, its volume kept
	// (default 5 min).
	IdleTimeout time.Duration
	// ReapEvery is how often a background loop runs Cleanup: idle sandboxes and
	// volumes past volume_ttl_minutes (default 30 s); negative means never
	// (short-lived processes call ReapIdle or Cleanup themselves).
	ReapEvery time.Duration
	// DenoVersion is the version of the npm package `deno` (default DefaultDenoVersion).
	DenoVersion string
	// NPM is the npm binary the host fetches Deno with (default "npm" on PATH).
	NPM string
	// Spares is how many sandboxes to keep booted for new sessions (default 0); see
	// spare.go.
	Spares int
	// DocsTimeout bounds the fetch of one docs URL (default 20 s).
	DocsTimeout time.Duration
}

// DefaultDenoVersion is the Deno the dependency snapshot gets.
const DefaultDenoVersion = "2.9.6"

// Runner is code execution over one engine: the dependency snapshot, the sessions and
// the search index. Its methods are safe for concurrent use, and several processes may
// share a DataDir (sandboxctl runs one per CLI call).
type Runner struct {
	o     Options
	cfg   Config
	eng   engine.Engine
	store *docsearch.Store
	log   *slog.Logger
	// images is the store of the dependency image and base its base; nil and "" for
	// a copy snapshot (see chooseBase).
	images ImageStore
	base   string

	mu       sync.Mutex
	sessions map[string]*Session
	filling  bool // a refill of spares runs
	// ownSpares are the keys of the spares this runner booted (Close ends those
	// still unclaimed).
	ownSpares map[string]bool
	// scans remembers the workspace files each volume's last scan saw.
	scans scanCache
	// docsDone is closed when the background docs indexing ends; nil when none
	// started (see IndexDocsInBackground).
	docsDone chan struct{}
	closed   bool

	stop chan struct{}
	wg   sync.WaitGroup
	// ctx ends with Close: background work (spares) stops.
	ctx    context.Context
	cancel context.CancelFunc
}

// RegionalEngine is an engine that places its sandboxes in a region the caller
// chooses; New hands it Config.Region. On any other engine a region is ignored, with
// a warning on Progress.
type RegionalEngine interface {
	engine.Engine
	// UseRegion makes the engine create its sandboxes in region.
	UseRegion(region string) error
}

// ErrOff: the configuration does not enable code execution.
var ErrOff = errors.New("code execution is off (no enabled [sandbox] section)")

// New opens the runner: the search index and the registries in DataDir. It fetches
// nothing; IndexDocs and EnsureSnapshot do.
func New(ctx context.Context, o Options) (*Runner, error) {
	if !o.Config.Enabled {
		return nil, ErrOff
	}
	if o.Engine == nil || o.DataDir == "" {
		return nil, errors.New("new coderun: Engine and DataDir are required")
	}
	if err := checkVolumes(o.Engine); err != nil {
		return nil, fmt.Errorf("new coderun: %w", err)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.ReapEvery == 0 {
		o.ReapEvery = 30 * time.Second
	}
	if o.DenoVersion == "" {
		o.DenoVersion = DefaultDenoVersion
	}
	if o.NPM == "" {
		o.NPM = "npm"
	}
	if o.DocsTimeout <= 0 {
		o.DocsTimeout = 20 * time.Second
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("new coderun: %w", err)
	}
	o.DataDir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("new coderun: %w", err)
	}
	if reg := o.Config.Region; reg != "" {
		if re, ok := o.Engine.(RegionalEngine); ok {
			if err := re.UseRegion(reg); err != nil {
				return nil, fmt.Errorf("new coderun: region %q: %w", reg, err)
			}
		} else {
			fmt.Fprintf(o.Progress, "region = %q is ignored: the %s engine has no regions\n", reg, o.Config.Provider)
			o.Logger.Warn("region ignored: the engine has no regions", "component", "coderun", "region", reg, "provider", o.Config.Provider)
		}
	}
	base, err := chooseBase(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("new coderun: %w", err)
	}
	var emb *docsearch.Embedder
	if e := o.Config.Embeddings; e != nil {
		emb = &docsearch.Embedder{URL: e.URL, Model: e.Model, Key: e.Key.Value(), Client: o.HTTPClient}
	}
	store, err := docsearch.Open(ctx, docsearch.Options{Path: filepath.Join(dir, "index.db"), Embedder: emb,
		URL: o.Config.StorageURL, Token: o.Config.StorageToken.Value()})
	if err != nil {
		return nil, fmt.Errorf("new coderun: %w", err)
	}
	r := &Runner{o: o, cfg: o.Config, eng: o.Engine, store: store, log: o.Logger.With("component", "coderun"),
		sessions: map[string]*Session{}, ownSpares: map[string]bool{}, stop: make(chan struct{}), base: base}
	if base != "" {
		r.images = o.Images
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if o.ReapEvery > 0 {
		r.wg.Add(1)
		go r.reapLoop()
	}
	return r, nil
}

// Close stops the background work, ends the unclaimed spares this runner booted and
// closes the index. Session sandboxes keep running (a later Runner on the same
// DataDir finds them); Session.Close ends them.
func (r *Runner) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	close(r.stop)
	r.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := r.dropOwnSpares(ctx)
	return errors.Join(err, r.store.Close())
}

// Config is the runner's configuration.
func (r *Runner) Config() Config { return r.cfg }

// PromptAddendum is the system-prompt addendum (see Config.PromptAddendum).
func (r *Runner) PromptAddendum() string { return r.cfg.PromptAddendum() }

func (r *Runner) reapLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.o.ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
			rep, err := r.Cleanup(ctx, r.o.Now(), ConfigTTL)
			if err != nil {
				r.log.Warn("cleanup", "err", err)
			} else if len(rep.Sandboxes)+len(rep.Volumes) > 0 {
				r.log.Info("cleanup", "idle_sessions", len(rep.Sandboxes), "volumes_deleted", len(rep.Volumes))
			}
			cancel()
		}
	}
}

// sessionState is what DataDir/sessions.json keeps of a session.
type sessionState struct {
	Sandbox  string    `json:"sandbox,omitempty"`
	Volume   string    `json:"volume"`
	Pid      int       `json:"pid,omitempty"` // the REPL server's, inside the sandbox
	LastUsed time.Time `json:"lastUsed"`
}

// withState runs f on the sessions file under an exclusive lock shared by every
// process on this DataDir; f's changes are saved when it returns nil. A file f left as
// it was is not rewritten (a write syncs the file and its directory: a few ms each, and
// a run_code reads the state several times).
func (r *Runner) withState(f func(m map[string]*sessionState) error) error {
	return r.locked("sessions", func() error {
		path := filepath.Join(r.o.DataDir, "sessions.json")
		m := map[string]*sessionState{}
		old, err := os.ReadFile(path)
		if err == nil {
			if err := json.Unmarshal(old, &m); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := f(m); err != nil {
			return err
		}
		b, _ := json.MarshalIndent(m, "", "  ")
		if old != nil && bytes.Equal(b, old) {
			return nil
		}
		return atomicfile.WriteFile(path, b, 0o600)
	})
}

// locked runs f holding DataDir/<name>.lock (lockedfile: a write lock, across
// processes).
func (r *Runner) locked(name string, f func() error) error {
	lf, err := lockedfile.OpenFile(filepath.Join(r.o.DataDir, name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	defer lf.Close()
	return f()
}

// validSession limits session ids to what is safe in names and files.
var validSession = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// volumeName is the volume of a session: a hash, so any session id fits every engine's
// volume names.
func volumeName(session string) string {
	h := sha256.Sum256([]byte(session))
	return "coderun-" + hex.EncodeToString(h[:8])
}
