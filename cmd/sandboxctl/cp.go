package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// copyOut copies a sandbox file, or a directory tree, to dst on the host ("-" writes
// a file to stdout). An existing directory dst receives the source under its name.
func copyOut(ctx context.Context, e engine.Engine, id, src, dst string, stdout io.Writer) error {
	fi, err := e.Stat(ctx, id, src)
	if err != nil {
		return err
	}
	if dst == "-" {
		if fi.IsDir {
			return fmt.Errorf("cp: %s is a directory; give a host directory", src)
		}
		data, err := e.ReadFile(ctx, id, src)
		if err != nil {
			return err
		}
		_, err = stdout.Write(data)
		return err
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	return copyOutTree(ctx, e, id, src, dst, fi)
}

func copyOutTree(ctx context.Context, e engine.Engine, id, src, dst string, fi engine.FileInfo) error {
	if !fi.IsDir {
		if fs.FileMode(fi.Mode)&fs.ModeType != 0 {
			return nil // symlinks and devices are not copied
		}
		data, err := e.ReadFile(ctx, id, src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, fs.FileMode(fi.Mode).Perm())
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := e.ListFiles(ctx, id, src)
	if err != nil {
		return err
	}
	for _, ent := range entries {
		if err := copyOutTree(ctx, e, id, path.Join(src, ent.Name), filepath.Join(dst, ent.Name), ent); err != nil {
			return err
		}
	}
	return nil
}

// copyIn copies a host file or directory tree ("-" reads a file from stdin) to dst
// in the sandbox. An existing directory dst receives the source under its name.
func copyIn(ctx context.Context, e engine.Engine, src, id, dst string, stdin io.Reader) error {
	if src == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return err
		}
		return e.WriteFile(ctx, id, dst, data, 0o644)
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi, err := e.Stat(ctx, id, dst); err == nil && fi.IsDir {
		dst = path.Join(dst, filepath.Base(src))
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := path.Join(dst, filepath.ToSlash(rel))
		if !st.IsDir() {
			target = dst
		}
		switch {
		case d.IsDir():
			return e.MkdirAll(ctx, id, target)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return e.WriteFile(ctx, id, target, data, uint32(info.Mode().Perm()))
		}
		return nil
	})
}
