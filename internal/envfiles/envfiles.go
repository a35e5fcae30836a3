// Package envfiles writes and removes the env files `proliferate env apply` and
// `proliferate env scrub` manage inside the workspace. cmd/proliferate imports it;
// it knows nothing of flags or HTTP.
package envfiles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Entry is one element of the --spec array.
type Entry struct {
	WorkspacePath string `json:"workspacePath"`
	Path          string `json:"path"`
	Format        string `json:"format"`
	Mode          string `json:"mode"`
	Keys          []Key  `json:"keys"`
}

// Key is one variable an Entry writes.
type Key struct {
	Key      string `json:"key"`
	Required bool   `json:"required"`
}

// ModeSecret marks entries whose files env scrub deletes.
const ModeSecret = "secret"

// UsageError is a bad --spec: the CLI exits 2 with its message.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// MissingError lists required keys no source provides; nothing was written.
type MissingError struct{ Keys []string }

func (e *MissingError) Error() string {
	return "Missing required environment variables: " + strings.Join(e.Keys, ", ")
}

// ParseSpec decodes the --spec JSON.
func ParseSpec(spec string) ([]Entry, error) {
	var raw json.RawMessage
	if err := json.Unmarshal([]byte(spec), &raw); err != nil {
		return nil, &UsageError{Msg: "Invalid JSON in --spec: " + err.Error()}
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' {
		return nil, &UsageError{Msg: "--spec must be a JSON array"}
	}
	var entries []Entry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, &UsageError{Msg: "Invalid JSON in --spec: " + err.Error()}
	}
	return entries, nil
}

// Options is what Apply and Scrub work on.
type Options struct {
	// Workspace is the workspace dir (config.EnvWorkspaceDir). Required.
	Workspace string
	// OverridesFile is a JSON object of key → string value that wins over Getenv.
	OverridesFile string
	// Getenv reads the environment; an empty value counts as missing.
	Getenv func(string) string
}

// Applied is one written file in Apply's answer. Path is the entry's own path
// exactly as the spec gave it (not joined with workspacePath), as the old CLI
// printed it and the platform parses it.
type Applied struct {
	Path     string `json:"path"`
	KeyCount int    `json:"keyCount"`
}

// target is an Entry with its paths resolved.
type target struct {
	entry Entry
	dir   string // the entry's workspacePath, absolute
	file  string // absolute file path
	rel   string // path relative to the workspace, for error messages
}

// resolve checks every entry's paths before anything is touched.
func resolve(workspace string, entries []Entry) ([]target, error) {
	ws, err := filepath.Abs(workspace)
	if err != nil {
		return nil, fmt.Errorf("resolve workspace %q: %w", workspace, err)
	}
	realWS := realPath(ws)
	out := make([]target, 0, len(entries))
	for _, e := range entries {
		wp := e.WorkspacePath
		if wp == "." {
			wp = ""
		}
		if err := checkRel(wp, true); err != nil {
			return nil, err
		}
		if err := checkRel(e.Path, false); err != nil {
			return nil, err
		}
		for _, k := range e.Keys {
			if !validKey(k.Key) {
				return nil, &UsageError{Msg: fmt.Sprintf("Invalid key in --spec: %q", k.Key)}
			}
		}
		dir := filepath.Join(ws, wp)
		file := filepath.Join(dir, e.Path)
		for _, p := range []struct{ abs, shown string }{{dir, e.WorkspacePath}, {file, e.Path}} {
			if !within(ws, p.abs) || !within(realWS, realPath(p.abs)) {
				return nil, &UsageError{Msg: "Path escapes workspace: " + p.shown}
			}
		}
		if file == dir {
			return nil, &UsageError{Msg: "Path escapes workspace: " + e.Path}
		}
		rel, _ := filepath.Rel(ws, file)
		out = append(out, target{entry: e, dir: dir, file: file, rel: filepath.ToSlash(rel)})
	}
	return out, nil
}

// checkRel applies the contract's order of path checks to p.
func checkRel(p string, emptyOK bool) error {
	if p == "" {
		if emptyOK {
			return nil
		}
		return &UsageError{Msg: "Path escapes workspace: " + p}
	}
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") {
		return &UsageError{Msg: "Path must be relative: " + p}
	}
	for _, part := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == filepath.Separator }) {
		if part == ".." {
			return &UsageError{Msg: "Path must not contain '..': " + p}
		}
	}
	if strings.ContainsRune(p, 0) {
		return &UsageError{Msg: "Path escapes workspace: " + p}
	}
	return nil
}

// validKey reports whether k can be a KEY of an env file line: an environment
// variable name (letters, digits, '_', '.', '-', not starting with a digit).
func validKey(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// within reports whether p is root or below it.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// realPath resolves the symlinks of p's longest existing prefix, so a link
// inside the workspace that points out of it (dangling or not) is caught
// before anything is written.
func realPath(p string) string { return realPathDepth(p, 0) }

func realPathDepth(p string, depth int) string {
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink != 0 && depth < 40 {
			if target, err := os.Readlink(cur); err == nil {
				if !filepath.IsAbs(target) {
					target = filepath.Join(filepath.Dir(cur), target)
				}
				return filepath.Join(realPathDepth(target, depth+1), rest)
			}
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// readOverrides returns the string values of the overrides file; a missing or
// unreadable file gives none.
func readOverrides(path string) map[string]string {
	out := map[string]string{}
	if path == "" {
		return out
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	var raw map[string]any
	if json.Unmarshal(b, &raw) != nil {
		return out
	}
	for k, v := range raw {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// Apply writes every entry's file. It checks all paths and all required keys
// first and writes nothing when one fails: a *UsageError for a bad path, a
// *MissingError for missing keys.
func Apply(o Options, entries []Entry) ([]Applied, error) {
	targets, err := resolve(o.Workspace, entries)
	if err != nil {
		return nil, err
	}
	over := readOverrides(o.OverridesFile)
	lookup := func(k string) (string, bool) {
		if v, ok := over[k]; ok {
			return v, true
		}
		if o.Getenv != nil {
			if v := o.Getenv(k); v != "" {
				return v, true
			}
		}
		return "", false
	}

	// Pass 1: every required key of every entry, before anything is written.
	var missing []string
	seen := map[string]bool{}
	for _, t := range targets {
		for _, k := range t.entry.Keys {
			if _, ok := lookup(k.Key); !ok && k.Required && !seen[k.Key] {
				seen[k.Key] = true
				missing = append(missing, k.Key)
			}
		}
	}
	if len(missing) > 0 {
		return nil, &MissingError{Keys: missing}
	}

	// Pass 2: write.
	applied := make([]Applied, 0, len(targets))
	for _, t := range targets {
		var buf bytes.Buffer
		n := 0
		for _, k := range t.entry.Keys {
			v, ok := lookup(k.Key)
			if !ok {
				continue
			}
			buf.WriteString(Line(k.Key, v))
			n++
		}
		if err := os.MkdirAll(filepath.Dir(t.file), 0o755); err != nil {
			return applied, fmt.Errorf("create folder for %s: %w", t.rel, err)
		}
		if err := atomicfile.WriteFile(t.file, buf.Bytes(), 0o600); err != nil {
			return applied, err
		}
		if err := excludeOnce(t.dir, t.entry.Path); err != nil {
			return applied, err
		}
		applied = append(applied, Applied{Path: t.entry.Path, KeyCount: n})
	}
	return applied, nil
}

// Scrub deletes the files of secret entries (missing files are fine), then the
// overrides file. It returns what it actually deleted, in order, as the old
// CLI printed it: each entry's own path as given in the spec, then the
// overrides file's absolute path.
func Scrub(o Options, entries []Entry) ([]string, error) {
	targets, err := resolve(o.Workspace, entries)
	if err != nil {
		return nil, err
	}
	scrubbed := []string{}
	for _, t := range targets {
		if t.entry.Mode != ModeSecret {
			continue
		}
		switch err := os.Remove(t.file); {
		case err == nil:
			scrubbed = append(scrubbed, t.entry.Path)
		case !errors.Is(err, fs.ErrNotExist):
			return scrubbed, fmt.Errorf("remove %s: %w", t.rel, err)
		}
	}
	if o.OverridesFile != "" {
		abs, err := filepath.Abs(o.OverridesFile)
		if err != nil {
			abs = o.OverridesFile
		}
		switch err := os.Remove(abs); {
		case err == nil:
			scrubbed = append(scrubbed, abs)
		case !errors.Is(err, fs.ErrNotExist):
			return scrubbed, fmt.Errorf("remove overrides file: %w", err)
		}
	}
	return scrubbed, nil
}

// excludeOnce appends path to dir/.git/info/exclude unless a line already says it.
func excludeOnce(dir, path string) error {
	git := filepath.Join(dir, ".git")
	if fi, err := os.Stat(git); err != nil || !fi.IsDir() {
		return nil
	}
	path = filepath.ToSlash(filepath.Clean(path))
	file := filepath.Join(git, "info", "exclude")
	old, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", file, err)
	}
	for _, l := range strings.Split(string(old), "\n") {
		l = strings.TrimSpace(l)
		if l == path || l == "/"+path {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(file), err)
	}
	var b bytes.Buffer
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(path + "\n")
	return atomicfile.WriteFile(file, b.Bytes(), 0o644)
}
