package coderun

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Modules written under /workspace are indexed from their exports without a
// save_code_modules: before a search, the session's live sandbox lists the volume's
// TypeScript and JavaScript files (one exec), the files changed since the last look
// are read and scanned (docsearch.Exports), and each becomes a module whose exports are
// its exported declarations' signatures. A module the model declared keeps its
// description and usage and gets the current exports; modules whose file is gone are
// dropped. A session without a live sandbox keeps what was indexed.

// workspace scan bounds: files listed, and the size of a file read.
const (
	maxWorkspaceFiles  = 500
	maxWorkspaceModule = 256 << 10
)

// scanCache is what the last scan of each volume saw: path → mtime and size.
type scanCache struct {
	mu   sync.Mutex
	seen map[string]map[string]string
}

// listWorkspace lists the code files of the volume in the sandbox, with their
// modification time and size.
func (r *Runner) listWorkspace(ctx context.Context, sandbox string) (map[string]string, error) {
	script := `cd "$0" && find . -xdev \( -name node_modules -o -name '.?*' \) -prune -o -type f ` +
		`\( -name '*.ts' -o -name '*.mts' -o -name '*.js' -o -name '*.mjs' \) ! -name '*.d.ts' -size -` +
		strconv.Itoa(maxWorkspaceModule>>10) + `k -printf '%T@ %s %P\n' | head -n ` + strconv.Itoa(maxWorkspaceFiles)
	var out bytes.Buffer
	code, err := r.eng.Exec(ctx, sandbox, engine.ExecRequest{Argv: []string{"sh", "-c", script, rules.CoderunWorkspace},
		Timeout: 30 * time.Second, Stdout: &out})
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("list %s: exit code %d", rules.CoderunWorkspace, code)
	}
	return parseFileList(out.String()), nil
}

// parseFileList reads find's "<mtime> <size> <path>" lines (written by the sandbox,
// so untrusted): path → "<mtime> <size>". Malformed lines are skipped.
func parseFileList(out string) map[string]string {
	files := map[string]string{}
	for l := range strings.Lines(out) {
		f := strings.SplitN(strings.TrimSuffix(l, "\n"), " ", 3)
		if len(f) != 3 || f[2] == "" || f[0] == "" || f[1] == "" {
			continue
		}
		if _, err := modulePath(f[2]); err != nil {
			continue
		}
		files[f[2]] = f[0] + " " + f[1]
	}
	return files
}

// indexWorkspace brings the session's auto-indexed modules up to date with the files
// of its volume, when it has a live sandbox.
func (s *Session) indexWorkspace(ctx context.Context, vol string) error {
	st, err := s.state()
	if err != nil || st.Sandbox == "" {
		return err
	}
	files, err := s.r.listWorkspace(ctx, st.Sandbox)
	if err != nil {
		return nil // the sandbox went meanwhile: keep what is indexed
	}
	c := &s.r.scans
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]map[string]string{}
	}
	before := c.seen[vol]
	c.mu.Unlock()
	known, err := s.r.store.Modules(ctx, vol)
	if err != nil {
		return err
	}
	declared := map[string]docsearch.Module{}
	var gone []string
	for _, m := range known {
		declared[m.Path] = m
		if _, ok := files[m.Path]; !ok {
			gone = append(gone, m.Path)
		}
	}
	var changed []docsearch.Module
	for p, stamp := range files {
		if before != nil && before[p] == stamp {
			if _, ok := declared[p]; ok {
				continue
			}
		}
		b, err := s.r.eng.ReadFile(ctx, st.Sandbox, path.Join(rules.CoderunWorkspace, p))
		if err != nil || len(b) > maxWorkspaceModule {
			continue
		}
		m, ok := moduleOf(p, string(b), declared[p])
		if ok {
			changed = append(changed, m)
		}
	}
	if err := s.r.store.DeleteModules(ctx, vol, gone); err != nil {
		return err
	}
	if len(changed) > 0 {
		slices.SortFunc(changed, func(a, b docsearch.Module) int { return strings.Compare(a.Path, b.Path) })
		if err := s.r.store.SaveModules(ctx, vol, changed); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.seen[vol] = files
	c.mu.Unlock()
	return nil
}

// moduleOf makes the module of a workspace file from its exports; a declared module
// keeps its description and usage. A file without exports is no module (false).
func moduleOf(p, src string, declared docsearch.Module) (docsearch.Module, bool) {
	exports := docsearch.Exports(src, false)
	if len(exports) == 0 && declared.Path == "" {
		return docsearch.Module{}, false
	}
	m := docsearch.Module{Path: p, Description: declared.Description, Usage: declared.Usage}
	var names []string
	for _, e := range exports {
		m.Exports = append(m.Exports, e.Signature)
		if e.Kind != "reexport" && e.Kind != "default" {
			names = append(names, e.Name)
		}
		if m.Description == "" && e.Doc != "" {
			m.Description = e.Doc
		}
	}
	if m.Description == "" {
		m.Description = "TypeScript module " + path.Join(rules.CoderunWorkspace, p)
	}
	if m.Usage == "" && len(names) > 0 {
		m.Usage = fmt.Sprintf("import { %s } from %q;", strings.Join(names, ", "), path.Join(rules.CoderunWorkspace, p))
	}
	return m, true
}
