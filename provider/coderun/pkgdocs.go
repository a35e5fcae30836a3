package coderun

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// The packages' own docs: every dependency's README and type declarations, as
// installed in the dependency snapshot, so they match its versions exactly. The
// build reads them in its sandbox (runtime/pkgdocs.ts, run by the snapshot's Deno),
// keeps them in DataDir/pkgdocs/<snapshot>.json and indexes them; a snapshot built
// before (or by a process on another machine sharing the image store) has its docs
// read once from a sandbox of it. Their sources are npm:<package>@<version>/<file>;
// the chunks of other versions of a package are pruned when a version is indexed.

//go:embed runtime/pkgdocs.ts
var pkgDocsScript []byte

// pkgDoc is one documentation file of an installed package.
type pkgDoc struct {
	Package string `json:"package"`
	Version string `json:"version"`
	Path    string `json:"path"`
	Text    string `json:"text"`
}

// source is the doc's source in the index.
func (d pkgDoc) source() string { return "npm:" + d.Package + "@" + d.Version + "/" + d.Path }

// maxPkgDocsOutput bounds what the collection prints.
const maxPkgDocsOutput = 64 << 20

// collectPackageDocs reads the configured packages' docs in a sandbox that has the
// dependency directory.
func (r *Runner) collectPackageDocs(ctx context.Context, sandbox string) ([]pkgDoc, error) {
	if len(r.cfg.Dependencies) == 0 {
		return nil, nil
	}
	script := path.Join(rules.CoderunPkgDocsDir, "pkgdocs.ts")
	if err := r.eng.WriteFile(ctx, sandbox, script, pkgDocsScript, 0o644); err != nil {
		return nil, fmt.Errorf("collect package docs: %w", err)
	}
	modules := path.Join(rules.CoderunDepsDir, "node_modules")
	argv := []string{rules.CoderunDeno, "run", "--no-prompt", "--allow-read=" + modules + "," + rules.CoderunPkgDocsDir, script, modules}
	for _, d := range r.cfg.Dependencies {
		argv = append(argv, d.Package)
	}
	var out, errOut limitedBuffer
	out.max, errOut.max = maxPkgDocsOutput, 4<<10
	code, err := r.eng.Exec(ctx, sandbox, engine.ExecRequest{Argv: argv, Cwd: rules.CoderunDepsDir,
		Env:     []string{"DENO_DIR=" + path.Join(rules.CoderunPkgDocsDir, "cache"), "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"},
		Timeout: 2 * time.Minute, Stdout: &out, Stderr: &errOut})
	if err != nil {
		return nil, fmt.Errorf("collect package docs: %w", err)
	}
	if code != 0 || out.over {
		return nil, fmt.Errorf("collect package docs: exit code %d (output over %d MB: %v): %s", code, maxPkgDocsOutput>>20, out.over, errOut.String())
	}
	var docs []pkgDoc
	sc := bufio.NewScanner(&out.Buffer)
	sc.Buffer(nil, maxPkgDocsOutput)
	for sc.Scan() {
		var d pkgDoc
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil || d.Package == "" || d.Path == "" {
			continue
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// limitedBuffer keeps at most max bytes and notes that there was more.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

func (r *Runner) pkgDocsPath(snapshot string) string {
	return filepath.Join(r.o.DataDir, "pkgdocs", snapshot+".json")
}

// savePackageDocs keeps the docs of a snapshot.
func (r *Runner) savePackageDocs(snapshot string, docs []pkgDoc) error {
	if docs == nil {
		docs = []pkgDoc{}
	}
	b, err := json.Marshal(docs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(r.pkgDocsPath(snapshot)), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(r.pkgDocsPath(snapshot), b, 0o600)
}

// packageDocs returns the docs of the snapshot: kept since its build, or read from a
// sandbox booted from it (and kept).
func (r *Runner) packageDocs(ctx context.Context, snap SnapshotInfo) ([]pkgDoc, error) {
	b, err := os.ReadFile(r.pkgDocsPath(snap.Name))
	if err == nil {
		var docs []pkgDoc
		if err := json.Unmarshal(b, &docs); err == nil {
			return docs, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	fmt.Fprintf(r.o.Progress, "reading the packages' docs from the dependency snapshot %s\n", snap.Name)
	spec := engine.Spec{Labels: map[string]string{"coderun": "docs"}}
	spec.Snapshot, spec.Image = bootFrom(snap)
	info, err := r.eng.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("read package docs: %w", err)
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := r.eng.Terminate(tctx, info.ID); err != nil {
			r.log.Warn("terminate the docs sandbox", "sandbox", info.ID, "err", err)
		}
	}()
	docs, err := r.collectPackageDocs(ctx, info.ID)
	if err != nil {
		return nil, err
	}
	return docs, r.savePackageDocs(snap.Name, docs)
}

// indexPackageDocs indexes the docs of the snapshot's packages and prunes those of
// other versions.
func (r *Runner) indexPackageDocs(ctx context.Context, snap SnapshotInfo) error {
	docs, err := r.packageDocs(ctx, snap)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range r.cfg.Dependencies {
		var keep []string
		added, files := 0, 0
		for _, doc := range docs {
			if doc.Package != d.Package {
				continue
			}
			chunks := docsearch.ChunkMarkdown(doc.Text)
			if strings.HasSuffix(doc.Path, ".ts") {
				chunks = docsearch.ChunkDeclarations(doc.Text)
			}
			st, err := r.store.IndexChunks(ctx, d.Package, doc.source(), chunks)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			keep = append(keep, doc.source())
			added += st.Added
			files++
		}
		if _, err := r.store.PruneDocs(ctx, d.Package, "npm:"+d.Package+"@", keep); err != nil {
			errs = append(errs, err)
		}
		if added > 0 {
			fmt.Fprintf(r.o.Progress, "docs of %s: %d files of the package, %d new chunks\n", d.Package, files, added)
		}
	}
	return errors.Join(errs...)
}
