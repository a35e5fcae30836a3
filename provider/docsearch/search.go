package docsearch

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Query is one search.
type Query struct {
	Text string
	// Package, when set, limits the search to that package's docs (no modules).
	Package string
	// Packages, when not nil, are the packages whose docs may be returned (those
	// configured now: the index may keep docs of others).
	Packages []string
	// Volume, when set and registered, adds that volume's code modules.
	Volume string
	// K is how many results; zero means 5.
	K int
}

// Result is one hit.
type Result struct {
	Package string  `json:"package"`
	Title   string  `json:"title"`
	Content string  `json:"content"`
	Score   float64 `json:"score"`
	// Source is the document URL of a doc chunk, or the path of a code module.
	Source string `json:"source"`
}

// Results are a search's hits, best first, and how they were ranked.
type Results struct {
	Results []Result `json:"results"`
	// Mode is "hybrid" (BM25 and vector, merged by reciprocal rank) or "bm25".
	Mode string `json:"mode"`
	// Note says why the search is BM25 only, when it is.
	Note string `json:"note,omitempty"`
}

// ModulePackage is the Package of code-module results.
const ModulePackage = "workspace"

// rrfK is the reciprocal-rank constant (the usual 60).
const rrfK = 60

// candidate is one row found by one ranking.
type candidate struct {
	module bool
	id     int64
	score  float64 // higher is better
	// matched is how many of the query's terms the row has (keyword ranking).
	matched int
}

func (c candidate) key() string { return fmt.Sprint(c.module, c.id) }

// ftsQuery turns free text into an FTS5 query: its words, each quoted, OR-ed.
func ftsQuery(text string) string {
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(words) > 32 {
		words = words[:32]
	}
	for i, w := range words {
		words[i] = `"` + w + `"`
	}
	return strings.Join(words, " OR ")
}

// selectiveQuery is ftsQuery without the words found in more than half of the doc
// chunks ("how", "the", …): their BM25 weight is nearly zero, yet scoring every chunk
// they match is most of a search's time. The rarest word stays when all are common.
func (s *Store) selectiveQuery(ctx context.Context, text string) (string, error) {
	words := strings.Split(ftsQuery(text), " OR ")
	if len(words) < 2 {
		return ftsQuery(text), nil
	}
	var total int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM doc_chunks`).Scan(&total); err != nil {
		return "", err
	}
	if total < 100 {
		return strings.Join(words, " OR "), nil
	}
	// One statement for all the words: on libSQL each statement is a round trip.
	var counts strings.Builder
	args := make([]any, len(words))
	for i, w := range words {
		if i > 0 {
			counts.WriteString(", ")
		}
		counts.WriteString(`(SELECT count(*) FROM doc_chunks_fts WHERE doc_chunks_fts MATCH ?)`)
		args[i] = w
	}
	dfs := make([]int, len(words))
	dests := make([]any, len(words))
	for i := range dfs {
		dests[i] = &dfs[i]
	}
	if err := s.db.QueryRowContext(ctx, `SELECT `+counts.String(), args...).Scan(dests...); err != nil {
		return "", err
	}
	var keep []string
	rarest, rarestDF := "", total+1
	for i, w := range words {
		df := dfs[i]
		if df < rarestDF {
			rarest, rarestDF = w, df
		}
		if 2*df <= total {
			keep = append(keep, w)
		}
	}
	if len(keep) == 0 {
		keep = []string{rarest}
	}
	return strings.Join(keep, " OR "), nil
}

// Search ranks doc chunks (and the volume's modules) for q.
func (s *Store) Search(ctx context.Context, q Query) (Results, error) {
	k := q.K
	if k <= 0 {
		k = 5
	}
	res := Results{Mode: "bm25", Results: []Result{}}
	if s.emb == nil {
		res.Note = "keyword search only (BM25): no embeddings endpoint is configured"
	}
	withModules := q.Package == "" && q.Volume != ""
	n := max(4*k, 50)
	kw, err := s.keyword(ctx, q, withModules, n)
	if err != nil {
		return Results{}, fmt.Errorf("search: %w", err)
	}
	ranked := kw
	if s.emb != nil && strings.TrimSpace(q.Text) != "" {
		vs, err := s.emb.Embed(ctx, []string{q.Text})
		if err != nil {
			return Results{}, fmt.Errorf("search: %w", err)
		}
		vec, err := s.vector(ctx, q, withModules, F32Blob(vs[0]), n)
		if err != nil {
			return Results{}, fmt.Errorf("search: %w", err)
		}
		ranked = reciprocalRank(kw, vec)
		res.Mode = "hybrid"
	}
	if len(ranked) > k {
		ranked = ranked[:k]
	}
	for _, c := range ranked {
		r, err := s.load(ctx, c)
		if err != nil {
			return Results{}, fmt.Errorf("search: %w", err)
		}
		r.Score = c.score
		res.Results = append(res.Results, r)
	}
	return res, nil
}

// keyword is the BM25 ranking (titles weigh 3x); doc chunks win ties.
func (s *Store) keyword(ctx context.Context, q Query, withModules bool, n int) ([]candidate, error) {
	fq, err := s.selectiveQuery(ctx, q.Text)
	if err != nil || fq == "" {
		return nil, err
	}
	terms := strings.Split(fq, " OR ")
	cov, covArgs := coverage("doc_chunks_fts", terms)
	docSQL := `SELECT f.rowid, bm25(doc_chunks_fts, 3.0, 1.0), ` + cov + ` FROM doc_chunks_fts f`
	args := append(covArgs, fq)
	if filter, fargs := packageFilter(q, "d."); filter != "" {
		docSQL += ` JOIN doc_chunks d ON d.id = f.rowid WHERE doc_chunks_fts MATCH ?` + filter
		args = append(args, fargs...)
	} else {
		docSQL += ` WHERE doc_chunks_fts MATCH ?`
	}
	docSQL += ` ORDER BY 2 LIMIT ?`
	out, err := s.rank(ctx, false, docSQL, append(args, n)...)
	if err != nil {
		return nil, err
	}
	combine(out, len(terms))
	if withModules {
		cov, covArgs := coverage("code_modules_fts", terms)
		mods, err := s.rank(ctx, true, `SELECT f.rowid, bm25(code_modules_fts, 3.0, 1.0), `+cov+` FROM code_modules_fts f
			JOIN code_modules m ON m.id = f.rowid WHERE code_modules_fts MATCH ? AND m.volume = ? ORDER BY 2 LIMIT ?`,
			append(covArgs, fq, q.Volume, n)...)
		if err != nil {
			return nil, err
		}
		combine(mods, len(terms))
		out = append(out, mods...)
	}
	slices.SortStableFunc(out, func(a, b candidate) int { return cmp.Compare(b.score, a.score) })
	return out, nil
}

// coverage is an SQL expression counting how many of the terms a row of table
// matches (one uncorrelated full-text lookup per term, in the same statement).
func coverage(table string, terms []string) (string, []any) {
	parts := make([]string, len(terms))
	args := make([]any, len(terms))
	for i, t := range terms {
		parts[i] = `(f.rowid IN (SELECT rowid FROM ` + table + ` WHERE ` + table + ` MATCH ?))`
		args[i] = t
	}
	return "(" + strings.Join(parts, " + ") + ")", args
}

// combine turns one index's candidates into scores in (0, 1] that compare across
// the two indexes: the share of the query's terms a row matches first, then its BM25
// relative to the best of its index. Raw BM25 scores of the doc chunks and the code
// modules do not compare: BM25's IDF over a table of one or two modules is about 0
// (FTS5 floors it at 1e-6), so a saved module's raw score would sink below every doc
// chunk.
func combine(c []candidate, terms int) {
	best := 0.0
	for _, x := range c {
		best = max(best, -x.score) // bm25() is lower-is-better
	}
	for i := range c {
		norm := 1.0
		if best > 0 {
			norm = -c[i].score / best
		}
		c[i].score = (float64(min(c[i].matched, terms)) + norm) / float64(terms+1)
	}
}

// packageFilter is the SQL condition (with its leading AND) and arguments that keep
// doc chunks of the query's packages; "" when every package may match.
func packageFilter(q Query, col string) (string, []any) {
	var sql strings.Builder
	var args []any
	if q.Package != "" {
		sql.WriteString(" AND " + col + "package = ?")
		args = append(args, q.Package)
	}
	if q.Packages != nil {
		sql.WriteString(" AND " + col + "package IN (''")
		for _, p := range q.Packages {
			sql.WriteString(", ?")
			args = append(args, p)
		}
		sql.WriteString(")")
	}
	return sql.String(), args
}

// vector is the cosine ranking: libSQL's native index (vector_top_k) for doc chunks of
// all packages when the store has one of the query's dimension, else a scan with
// vector_distance_cos (libSQL's, or ours on SQLite; either is NULL or 1 for a zero
// vector). Modules are few per volume: they are always scanned.
func (s *Store) vector(ctx context.Context, q Query, withModules bool, blob []byte, n int) ([]candidate, error) {
	docSQL := `SELECT id, coalesce(vector_distance_cos(embedding, ?), 1.0) FROM doc_chunks WHERE embedding IS NOT NULL AND length(embedding) = ?`
	args := []any{blob, len(blob)}
	filter, fargs := packageFilter(q, "")
	docSQL += filter
	args = append(args, fargs...)
	if d := s.vecDim(); d > 0 && 4*d == len(blob) && q.Package == "" {
		// The native index's top n, then the allowed packages among them.
		filter, fargs := packageFilter(q, "d.")
		docSQL = `SELECT d.id, coalesce(vector_distance_cos(d.embedding, ?), 1.0) FROM vector_top_k('` + vecIndexName + `', vector32(?), ?) AS v
			JOIN doc_chunks d ON d.id = v.id WHERE length(d.embedding) = ?` + filter
		args = append([]any{blob, blob, n, len(blob)}, fargs...)
	}
	out, err := s.rank(ctx, false, docSQL+` ORDER BY 2 LIMIT ?`, append(args, n)...)
	if err != nil {
		return nil, err
	}
	if withModules {
		mods, err := s.rank(ctx, true, `SELECT id, coalesce(vector_distance_cos(embedding, ?), 1.0) FROM code_modules
			WHERE volume = ? AND embedding IS NOT NULL AND length(embedding) = ? ORDER BY 2 LIMIT ?`, blob, q.Volume, len(blob), n)
		if err != nil {
			return nil, err
		}
		out = append(out, mods...)
	}
	for i := range out {
		out[i].score = 1 - out[i].score // similarity
	}
	slices.SortStableFunc(out, func(a, b candidate) int { return cmp.Compare(b.score, a.score) })
	return out, nil
}

func (s *Store) rank(ctx context.Context, module bool, query string, args ...any) ([]candidate, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []candidate
	for rows.Next() {
		c := candidate{module: module}
		dest := []any{&c.id, &c.score}
		if len(cols) > 2 {
			dest = append(dest, &c.matched)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// reciprocalRank merges rankings: score = Σ 1/(rrfK + rank).
func reciprocalRank(lists ...[]candidate) []candidate {
	sum := map[string]*candidate{}
	var order []string
	for _, l := range lists {
		for i, c := range l {
			key := c.key()
			p, ok := sum[key]
			if !ok {
				cc := c
				cc.score = 0
				p = &cc
				sum[key] = p
				order = append(order, key)
			}
			p.score += 1 / float64(rrfK+i+1)
		}
	}
	out := make([]candidate, 0, len(order))
	for _, key := range order {
		out = append(out, *sum[key])
	}
	slices.SortStableFunc(out, func(a, b candidate) int { return cmp.Compare(b.score, a.score) })
	return out
}

// load reads a candidate's row.
func (s *Store) load(ctx context.Context, c candidate) (Result, error) {
	var r Result
	if !c.module {
		err := s.db.QueryRowContext(ctx, `SELECT package, title, content, source FROM doc_chunks WHERE id = ?`, c.id).
			Scan(&r.Package, &r.Title, &r.Content, &r.Source)
		return r, err
	}
	var m Module
	var exports string
	err := s.db.QueryRowContext(ctx, `SELECT path, description, exports, usage FROM code_modules WHERE id = ?`, c.id).
		Scan(&m.Path, &m.Description, &exports, &m.Usage)
	if err == sql.ErrNoRows {
		return r, err
	}
	_ = jsonUnmarshalStrings(exports, &m.Exports)
	return Result{Package: ModulePackage, Title: moduleTitle(m), Content: moduleText(m), Source: m.Path}, err
}
