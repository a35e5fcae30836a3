package docsearch

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// IndexStats say what an IndexDocs did.
type IndexStats struct {
	Added     int `json:"added"`
	Unchanged int `json:"unchanged"`
	Removed   int `json:"removed"`
}

// IndexDocs indexes one markdown document of a package: chunks whose hash is already
// stored for (pkg, source) are kept as they are, new ones are added (and embedded when
// the store has an Embedder), and chunks no longer in the document are removed.
func (s *Store) IndexDocs(ctx context.Context, pkg, source, md string) (IndexStats, error) {
	var st IndexStats
	chunks := ChunkMarkdown(md)
	want := map[string]Chunk{}
	var order []string
	for _, c := range chunks {
		h := c.Hash()
		if _, dup := want[h]; !dup {
			order = append(order, h)
		}
		want[h] = c
	}
	have := map[string]int64{}
	rows, err := s.db.QueryContext(ctx, `SELECT id, hash FROM doc_chunks WHERE package = ? AND source = ?`, pkg, source)
	if err != nil {
		return st, fmt.Errorf("index %s: %w", source, err)
	}
	for rows.Next() {
		var id int64
		var h string
		if err := rows.Scan(&id, &h); err != nil {
			rows.Close()
			return st, fmt.Errorf("index %s: %w", source, err)
		}
		have[h] = id
	}
	rows.Close()
	var add []Chunk
	for _, h := range order {
		if _, ok := have[h]; ok {
			st.Unchanged++
			continue
		}
		add = append(add, want[h])
	}
	var vecs [][]float32
	if s.emb != nil && len(add) > 0 {
		texts := make([]string, len(add))
		for i, c := range add {
			texts[i] = c.Title + "\n" + c.Content
		}
		if vecs, err = s.emb.Embed(ctx, texts); err != nil {
			return st, fmt.Errorf("index %s: %w", source, err)
		}
	}
	if len(vecs) > 0 {
		s.ensureVecIndex(ctx, len(vecs[0]))
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		for h, id := range have {
			if _, keep := want[h]; keep {
				continue
			}
			if err := deleteRow(ctx, tx, "doc_chunks", id); err != nil {
				return err
			}
			if err := s.deleteVec(ctx, tx, id); err != nil {
				return err
			}
			st.Removed++
		}
		for i, c := range add {
			var blob []byte
			if vecs != nil {
				blob = F32Blob(vecs[i])
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO doc_chunks (package, source, title, content, hash, embedding) VALUES (?, ?, ?, ?, ?, ?)`,
				pkg, source, c.Title, c.Content, c.Hash(), blob)
			if err != nil {
				return err
			}
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO doc_chunks_fts (rowid, title, content) VALUES (?, ?, ?)`, id, c.Title, c.Content); err != nil {
				return err
			}
			if err := s.putVec(ctx, tx, id, blob); err != nil {
				return err
			}
			st.Added++
		}
		return nil
	})
	if err != nil {
		return IndexStats{}, fmt.Errorf("index %s: %w", source, err)
	}
	return st, nil
}

// deleteRow deletes a row of doc_chunks or code_modules and its full-text entry.
func deleteRow(ctx context.Context, tx *sql.Tx, table string, id int64) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+`_fts WHERE rowid = ?`, id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = ?`, id)
	return err
}

// maxDocBytes caps one fetched document.
const maxDocBytes = 32 << 20

// FetchDocs fetches a markdown document with client (nil: http.DefaultClient) and
// indexes it with IndexDocs.
func (s *Store) FetchDocs(ctx context.Context, client *http.Client, pkg, url string) (IndexStats, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return IndexStats{}, fmt.Errorf("fetch docs %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/markdown, text/plain;q=0.9, */*;q=0.1")
	resp, err := client.Do(req)
	if err != nil {
		return IndexStats{}, fmt.Errorf("fetch docs: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return IndexStats{}, fmt.Errorf("fetch docs %s: %s", url, resp.Status)
	}
	var b strings.Builder
	if _, err := io.Copy(&b, io.LimitReader(resp.Body, maxDocBytes)); err != nil {
		return IndexStats{}, fmt.Errorf("fetch docs %s: %w", url, err)
	}
	return s.IndexDocs(ctx, pkg, url, b.String())
}
