package caddy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/caddyfile"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Config configures a Manager.
type Config struct {
	// SnippetPath is the user snippet the main Caddyfile imports.
	SnippetPath string
	// Caddyfile is the main Caddyfile that a load sends to Caddy.
	Caddyfile string
	// Admin is Caddy's admin endpoint: host:port, http://host:port or unix//path.
	Admin string
	// Snippet is what the snippet file must hold.
	Snippet caddyfile.Snippet
	// CaddyBin validates snippets before they are written; empty means "caddy"
	// from PATH, and validation is skipped when there is none.
	CaddyBin string
	// Timeout bounds one admin request or validation; default 10s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Manager keeps Caddy routing the preview site to the preview proxy. Its
// methods are safe for concurrent use; writes and loads are serialized.
type Manager struct {
	snippetPath string
	caddyfile   string
	admin       admin
	preview     string
	snippet     []byte
	caddyBin    string
	timeout     time.Duration
	log         *slog.Logger

	mu sync.Mutex // held around every snippet write and load
}

// New checks cfg and returns a Manager. It does not touch Caddy.
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		return nil, errors.New("caddy: Logger is required")
	}
	if !filepath.IsAbs(cfg.SnippetPath) {
		return nil, fmt.Errorf("caddy: snippet path %q must be absolute", cfg.SnippetPath)
	}
	if !filepath.IsAbs(cfg.Caddyfile) {
		return nil, fmt.Errorf("caddy: Caddyfile path %q must be absolute", cfg.Caddyfile)
	}
	a, err := parseAdmin(cfg.Admin)
	if err != nil {
		return nil, fmt.Errorf("caddy: %w", err)
	}
	snip, err := cfg.Snippet.Render()
	if err != nil {
		return nil, fmt.Errorf("caddy: render snippet: %w", err)
	}
	bin := cfg.CaddyBin
	if bin == "" {
		bin, _ = exec.LookPath("caddy")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &Manager{
		snippetPath: cfg.SnippetPath,
		caddyfile:   cfg.Caddyfile,
		admin:       a,
		preview:     cfg.Snippet.Preview,
		snippet:     snip,
		caddyBin:    bin,
		timeout:     cfg.Timeout,
		log:         cfg.Logger.With("component", "caddy"),
	}, nil
}

// Admin returns the admin endpoint as configured.
func (m *Manager) Admin() string { return m.admin.addr }

// WriteSnippet writes the snippet file when it does not already hold the
// rendered snippet, so a Caddy that starts later picks it up.
func (m *Manager) WriteSnippet(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _, err := m.install(ctx, m.snippet)
	return err
}

// Routed reports whether Caddy's running configuration sends traffic to the
// preview proxy; an error means the admin endpoint could not tell.
func (m *Manager) Routed(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	b, err := m.admin.do(ctx, "GET", "/config/", "", nil)
	if err != nil {
		return false, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return false, fmt.Errorf("decode caddy config from %s: %w", m.admin.addr, err)
	}
	return dials(v, m.preview), nil
}

// Ensure makes Caddy route the preview site to the preview proxy: nothing
// when its running configuration already does (no reload, no dropped
// connection), else write the snippet and load the main Caddyfile through the
// admin endpoint. A failed load puts the previous snippet back.
func (m *Manager) Ensure(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	routed, err := m.Routed(ctx)
	if err != nil {
		return err
	}
	if routed {
		return nil
	}
	return m.apply(ctx, m.snippet)
}

// apply writes snippet and loads the main Caddyfile; m.mu must be held.
func (m *Manager) apply(ctx context.Context, snippet []byte) error {
	prev, changed, err := m.install(ctx, snippet)
	if err != nil {
		return err
	}
	if err := m.load(ctx); err != nil {
		// With no previous file the new, validated snippet stays: removing it
		// would leave Caddy an import it cannot find at its next start.
		if changed && prev != nil {
			if rerr := writeAtomic(m.snippetPath, prev); rerr != nil {
				return fmt.Errorf("%w (and restore previous snippet: %v)", err, rerr)
			}
		}
		return err
	}
	routed, err := m.Routed(ctx)
	if err != nil {
		return fmt.Errorf("check caddy config after load: %w", err)
	}
	if !routed {
		return fmt.Errorf("caddy loaded %s but does not route to the preview proxy at %s (does it import %s?)", m.caddyfile, m.preview, m.snippetPath)
	}
	m.log.Info("caddy loaded the snippet", "admin", m.admin.addr, "snippet", m.snippetPath)
	return nil
}

// install validates snippet and writes it unless the file already holds it.
// It returns the previous content (nil when there was no file) and whether the
// file changed.
func (m *Manager) install(ctx context.Context, snippet []byte) (prev []byte, changed bool, err error) {
	if len(bytes.TrimSpace(snippet)) == 0 {
		// Caddy 2.6 refuses to start when an imported file is empty.
		return nil, false, errors.New("refuse to write an empty snippet")
	}
	prev, err = os.ReadFile(m.snippetPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("read snippet: %w", err)
	}
	if err == nil && bytes.Equal(prev, snippet) {
		return prev, false, nil
	}
	if err := m.validate(ctx, snippet); err != nil {
		return prev, false, err
	}
	if err := writeAtomic(m.snippetPath, snippet); err != nil {
		return prev, false, err
	}
	return prev, true, nil
}

// validate runs `caddy validate` on a Caddyfile that imports snippet.
func (m *Manager) validate(ctx context.Context, snippet []byte) error {
	if m.caddyBin == "" {
		return nil
	}
	// Next to the snippet, not in the shared temp dir: a sidecar killed
	// while Caddy validates leaves its folder where the next one removes it.
	parent := filepath.Dir(m.snippetPath)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("validate snippet: %w", err)
	}
	removeStale(parent, validatePrefix, time.Now().Add(-staleValidateAge))
	dir, err := os.MkdirTemp(parent, validatePrefix)
	if err != nil {
		return fmt.Errorf("validate snippet: %w", err)
	}
	defer os.RemoveAll(dir)
	snip := filepath.Join(dir, "user.caddy")
	if err := os.WriteFile(snip, snippet, 0o600); err != nil {
		return fmt.Errorf("validate snippet: %w", err)
	}
	main := filepath.Join(dir, "Caddyfile")
	wrapper := "{\n    admin off\n}\n\n:1 {\n    import " + snip + "\n}\n"
	if err := os.WriteFile(main, []byte(wrapper), 0o600); err != nil {
		return fmt.Errorf("validate snippet: %w", err)
	}
	return Validate(ctx, m.caddyBin, main, m.timeout)
}

// validatePrefix names the folders validate works in, next to the snippet
// (the main Caddyfile imports the snippet by its path, never this folder).
const validatePrefix = ".validate-"

// staleValidateAge is past any validation's timeout: a folder this old
// belongs to a sidecar that died while validating.
const staleValidateAge = 10 * time.Minute

// removeStale removes the entries of dir named prefix* last changed before cutoff.
func removeStale(dir, prefix string, cutoff time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// Validate runs `caddy validate` on the Caddyfile at path and returns Caddy's
// complaint as the error.
func Validate(ctx context.Context, caddyBin, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, caddyBin, "validate", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(path), "XDG_DATA_HOME="+filepath.Dir(path), "XDG_CONFIG_HOME="+filepath.Dir(path))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("caddy rejected the snippet: %s", lastError(out, err))
	}
	return nil
}

// lastError picks Caddy's final error line out of its log output.
func lastError(out []byte, err error) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "Error:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "Error:"))
		}
	}
	if len(lines) > 0 && lines[len(lines)-1] != "" {
		return lines[len(lines)-1]
	}
	return err.Error()
}

// load sends the main Caddyfile to Caddy's /load; m.mu must be held.
func (m *Manager) load(ctx context.Context) error {
	body, err := os.ReadFile(m.caddyfile)
	if err != nil {
		return fmt.Errorf("read main Caddyfile: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if _, err := m.admin.do(ctx, "POST", "/load", "text/caddyfile", body); err != nil {
		return err
	}
	return nil
}

// writeAtomic replaces path with data: temp file, fsync, rename, fsync dir.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write snippet: %w", err)
	}
	return atomicfile.WriteFile(path, data, 0o644)
}
