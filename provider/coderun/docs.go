package coderun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
)

// Docs come from three places: the packages themselves (README and type declarations,
// indexed with the dependency snapshot, see pkgdocs.go), the `docs` URLs of the
// configuration (fetched concurrently, each within Options.DocsTimeout, conditionally
// on their ETag or Last-Modified), and its `docs` files and folders. Searches return
// the docs of the configured packages only: the index may hold others, of an earlier
// configuration or of another runner on the same data dir.

// maxDocsFetches is how many docs URLs are fetched at once.
const maxDocsFetches = 8

// docs files in a folder: markdown, text and type declarations, at most
// maxFolderFiles of them, each at most maxDocFileBytes.
const (
	maxFolderFiles  = 500
	maxDocFileBytes = 8 << 20
)

var docExtensions = []string{".md", ".markdown", ".mdx", ".txt", ".d.ts", ".d.mts", ".d.cts"}

// IndexDocs indexes every dependency's docs: the packages' own when the dependency
// snapshot exists (its build indexes them too), and the configured URLs, files and
// folders; unchanged chunks are skipped. A source that fails is reported on Progress
// and skipped; the error joins them all.
func (r *Runner) IndexDocs(ctx context.Context) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, maxDocsFetches)
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	if snap, ok, err := r.LookupSnapshot(ctx); err != nil {
		fail(err)
	} else if ok {
		if err := r.indexPackageDocs(ctx, snap); err != nil {
			fmt.Fprintf(r.o.Progress, "docs of the packages: %v\n", err)
			fail(err)
		}
	}
	for _, d := range r.cfg.Dependencies {
		for _, u := range d.Docs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := r.indexDocsSource(ctx, d.Package, u); err != nil {
					fmt.Fprintf(r.o.Progress, "docs of %s: %v\n", d.Package, err)
					fail(err)
				}
			}()
		}
	}
	wg.Wait()
	// The chunks of URLs no longer configured for a package go.
	for _, d := range r.cfg.Dependencies {
		if _, err := r.store.PruneDocs(ctx, d.Package, "http", d.Docs); err != nil {
			fail(err)
		}
	}
	return errors.Join(errs...)
}

// indexDocsSource indexes one `docs` entry: a URL, a file or a folder.
func (r *Runner) indexDocsSource(ctx context.Context, pkg, src string) error {
	if isDocsURL(src) {
		ctx, cancel := context.WithTimeout(ctx, r.o.DocsTimeout)
		defer cancel()
		st, err := r.store.FetchDocs(ctx, r.o.HTTPClient, pkg, src)
		if err != nil {
			return err
		}
		if st.Added+st.Removed > 0 {
			fmt.Fprintf(r.o.Progress, "docs of %s: %s: %d new, %d unchanged, %d removed chunks\n", pkg, src, st.Added, st.Unchanged, st.Removed)
		}
		return nil
	}
	files, err := docFiles(src)
	if err != nil {
		return err
	}
	var errs []error
	added := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		chunks := docsearch.ChunkMarkdown(string(b))
		if strings.HasSuffix(f, ".ts") {
			chunks = docsearch.ChunkDeclarations(string(b))
		}
		st, err := r.store.IndexChunks(ctx, pkg, "file://"+f, chunks)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		added += st.Added
	}
	if len(files) > 1 || files[0] != filepath.Clean(src) {
		// A folder: the chunks of files no longer in it go.
		var keep []string
		for _, f := range files {
			keep = append(keep, "file://"+f)
		}
		abs, _ := filepath.Abs(src)
		if _, err := r.store.PruneDocs(ctx, pkg, "file://"+abs+string(filepath.Separator), keep); err != nil {
			errs = append(errs, err)
		}
	}
	if added > 0 {
		fmt.Fprintf(r.o.Progress, "docs of %s: %s: %d files, %d new chunks\n", pkg, src, len(files), added)
	}
	return errors.Join(errs...)
}

// docFiles are the files of a docs path: the file itself, or a folder's docs files
// (by extension, skipping hidden folders and node_modules), sorted.
func docFiles(root string) ([]string, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("docs %s: %w", root, err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		if fi.Size() > maxDocFileBytes {
			return nil, fmt.Errorf("docs %s: %d bytes, over %d MB", root, fi.Size(), maxDocFileBytes>>20)
		}
		return []string{abs}, nil
	}
	var files []string
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != abs && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !slices.ContainsFunc(docExtensions, func(e string) bool { return strings.HasSuffix(d.Name(), e) }) {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > maxDocFileBytes {
			return nil
		}
		if len(files) >= maxFolderFiles {
			return fmt.Errorf("over %d docs files: name a narrower folder", maxFolderFiles)
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("docs %s: %w", root, err)
	}
	return files, nil
}

// IndexDocsInBackground indexes the docs without making anyone wait: IndexDocs
// runs, and, when the dependency snapshot is missing, it is built (its build indexes
// the packages' own docs). Once per Runner; Close stops and waits for it. A search
// meanwhile waits for IndexDocs up to searchWaitForDocs, then returns what is indexed
// with a note.
func (r *Runner) IndexDocsInBackground() {
	r.mu.Lock()
	if r.docsDone != nil || r.closed {
		r.mu.Unlock()
		return
	}
	done := make(chan struct{})
	r.docsDone = done
	r.wg.Add(2)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Minute)
		defer cancel()
		if err := r.IndexDocs(ctx); err != nil {
			r.log.Warn("index docs", "err", err)
		}
	}()
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Minute)
		defer cancel()
		if _, err := r.EnsureSnapshot(ctx); err != nil {
			r.log.Warn("build the dependency snapshot", "err", err)
		}
	}()
}

// searchWaitForDocs is how long a search waits for the background indexing.
const searchWaitForDocs = 10 * time.Second

// packages are the configured packages' names.
func (r *Runner) packages() []string {
	pkgs := []string{}
	for _, d := range r.cfg.Dependencies {
		pkgs = append(pkgs, d.Package)
	}
	return pkgs
}

// search runs a query over the configured packages' docs (and vol's modules).
func (r *Runner) search(ctx context.Context, query, pkg, vol string, k int) (docsearch.Results, error) {
	r.mu.Lock()
	done := r.docsDone
	r.mu.Unlock()
	indexing := false
	if done != nil {
		t := time.NewTimer(searchWaitForDocs)
		select {
		case <-done:
		case <-t.C:
			indexing = true
		case <-ctx.Done():
			t.Stop()
			return docsearch.Results{}, ctx.Err()
		}
		t.Stop()
	}
	res, err := r.store.Search(ctx, docsearch.Query{Text: query, Package: pkg, Packages: r.packages(), Volume: vol, K: k})
	if err != nil {
		return res, err
	}
	if indexing {
		note := "the docs are still being indexed: search again shortly for more"
		if res.Note != "" {
			note = res.Note + "; " + note
		}
		res.Note = note
	}
	return res, nil
}

// Search searches the docs of every configured package (pkg empty) or one, without a
// session.
func (r *Runner) Search(ctx context.Context, query, pkg string, k int) (docsearch.Results, error) {
	return r.search(ctx, query, pkg, "", k)
}

// searchBudget is the byte budget of one search_docs answer.
func (r *Runner) searchBudget() int { return r.cfg.outputBudget() }
