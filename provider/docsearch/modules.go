package docsearch

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Module is a code module a model saved in its session's volume. Its source stays in
// the volume; the index keeps what the model declared.
type Module struct {
	Path        string   `json:"path"`
	Description string   `json:"description"`
	Exports     []string `json:"exports,omitempty"`
	Usage       string   `json:"usage,omitempty"`
}

// Volume is a session_volumes row.
type Volume struct {
	Name         string    `json:"name"`
	Session      string    `json:"session"`
	Created      time.Time `json:"created"`
	LastAccessed time.Time `json:"lastAccessed"`
}

// ErrNoVolume: the volume has no registry row (never created, or cleaned up).
var ErrNoVolume = errors.New("no such session volume")

// TouchVolume records that session's volume name was mounted at now: the row is created
// on the first call and its last_accessed_at bumped on every call.
func (s *Store) TouchVolume(ctx context.Context, name, session string, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO session_volumes (name, session, created_at, last_accessed_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET last_accessed_at = excluded.last_accessed_at`,
		name, session, now.UnixMilli(), now.UnixMilli())
	if err != nil {
		return fmt.Errorf("touch volume %s: %w", name, err)
	}
	return nil
}

// Volumes lists the registry, oldest access first.
func (s *Store) Volumes(ctx context.Context) ([]Volume, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, session, created_at, last_accessed_at FROM session_volumes ORDER BY last_accessed_at, name`)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	var out []Volume
	for rows.Next() {
		var v Volume
		var c, a int64
		if err := rows.Scan(&v.Name, &v.Session, &c, &a); err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		v.Created, v.LastAccessed = time.UnixMilli(c).UTC(), time.UnixMilli(a).UTC()
		out = append(out, v)
	}
	return out, rows.Err()
}

// DeleteVolume removes a volume's registry row and its code modules; a missing row is
// success.
func (s *Store) DeleteVolume(ctx context.Context, name string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM code_modules_fts WHERE rowid IN (SELECT id FROM code_modules WHERE volume = ?)`, name); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM code_modules WHERE volume = ?`, name); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM session_volumes WHERE name = ?`, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	return nil
}

// SaveModules indexes modules of a live volume, replacing earlier entries of the same
// paths. A volume without a registry row is refused with ErrNoVolume.
func (s *Store) SaveModules(ctx context.Context, volume string, mods []Module) error {
	for _, m := range mods {
		if strings.TrimSpace(m.Path) == "" || strings.TrimSpace(m.Description) == "" {
			return fmt.Errorf("save modules: every module needs a path and a description")
		}
	}
	var vecs [][]float32
	if s.emb != nil && len(mods) > 0 {
		texts := make([]string, len(mods))
		for i, m := range mods {
			texts[i] = moduleTitle(m) + "\n" + moduleText(m)
		}
		var err error
		if vecs, err = s.emb.Embed(ctx, texts); err != nil {
			return fmt.Errorf("save modules: %w", err)
		}
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM session_volumes WHERE name = ?`, volume).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: %s", ErrNoVolume, volume)
		}
		for i, m := range mods {
			var old int64
			err := tx.QueryRowContext(ctx, `SELECT id FROM code_modules WHERE volume = ? AND path = ?`, volume, m.Path).Scan(&old)
			if err == nil {
				for _, st := range deleteStmts("code_modules", old) {
					if _, err := tx.ExecContext(ctx, st.sql, st.args...); err != nil {
						return err
					}
				}
			} else if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			var blob []byte
			if vecs != nil {
				blob = F32Blob(vecs[i])
			}
			exports, _ := json.Marshal(m.Exports)
			res, err := tx.ExecContext(ctx, `INSERT INTO code_modules (volume, path, description, exports, usage, embedding) VALUES (?, ?, ?, ?, ?, ?)`,
				volume, m.Path, m.Description, string(exports), m.Usage, blob)
			if err != nil {
				return err
			}
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO code_modules_fts (rowid, title, content) VALUES (?, ?, ?)`, id, moduleTitle(m), moduleText(m)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save modules: %w", err)
	}
	return nil
}

// Modules lists the modules indexed for a volume, by path.
func (s *Store) Modules(ctx context.Context, volume string) ([]Module, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT path, description, exports, usage FROM code_modules WHERE volume = ? ORDER BY path`, volume)
	if err != nil {
		return nil, fmt.Errorf("list modules: %w", err)
	}
	defer rows.Close()
	var out []Module
	for rows.Next() {
		var m Module
		var exports string
		if err := rows.Scan(&m.Path, &m.Description, &exports, &m.Usage); err != nil {
			return nil, fmt.Errorf("list modules: %w", err)
		}
		_ = json.Unmarshal([]byte(exports), &m.Exports)
		out = append(out, m)
	}
	return out, rows.Err()
}

func moduleTitle(m Module) string { return m.Path }

// moduleText is what search shows and matches of a module.
func moduleText(m Module) string {
	var b strings.Builder
	b.WriteString(m.Description)
	if len(m.Exports) > 0 {
		b.WriteString("\nExports: " + strings.Join(m.Exports, ", "))
	}
	if m.Usage != "" {
		b.WriteString("\nUsage:\n" + m.Usage)
	}
	return b.String()
}

func jsonUnmarshalStrings(s string, out *[]string) error { return json.Unmarshal([]byte(s), out) }

// DeleteModules removes the modules of a volume at paths (files no longer there).
func (s *Store) DeleteModules(ctx context.Context, volume string, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, p := range paths {
			if _, err := tx.ExecContext(ctx, `DELETE FROM code_modules_fts WHERE rowid IN (SELECT id FROM code_modules WHERE volume = ? AND path = ?)`, volume, p); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM code_modules WHERE volume = ? AND path = ?`, volume, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete modules: %w", err)
	}
	return nil
}
