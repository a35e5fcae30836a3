package build

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// files writes a copy or binary step's files into a new layer folder and stores it.
func (b *builder) files(ctx context.Context, s image.Step) (string, error) {
	dir, err := os.MkdirTemp(filepath.Join(b.o.Store.Dir(), "tmp"), "files-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)                      // gone already when the store took it
	if err := os.Chmod(dir, 0o755); err != nil { // MkdirTemp's 0700; a layer's root is 0755
		return "", err
	}
	switch s.Kind {
	case image.KindBinary:
		src := b.o.Sources.Binaries[s.Name]
		if src == "" {
			return "", fmt.Errorf("no file for binary %s (give it with --binary %s=PATH)", s.Name, s.Name)
		}
		if err := copyFile(src, layerPath(dir, image.BinaryPath(s.Name)), 0o755); err != nil {
			return "", err
		}
	case image.KindCopy:
		if b.o.Sources.Context == "" {
			return "", fmt.Errorf("copy %s: no build context", s.Src)
		}
		if err := copyTree(filepath.Join(b.o.Sources.Context, filepath.FromSlash(s.Src)), layerPath(dir, s.Dst)); err != nil {
			return "", err
		}
	}
	return b.o.Store.CommitLayer(ctx, dir, store.CommitOptions{Move: true})
}

// layerPath is the host path of the absolute image path p in the layer folder dir,
// creating its parents (0755).
func layerPath(dir, p string) string {
	dst := filepath.Join(dir, filepath.FromSlash(p))
	_ = os.MkdirAll(filepath.Dir(dst), 0o755)
	return dst
}

// copyTree copies a file, or a folder's contents, to dst (COPY's semantics); symlinks
// are copied as links, other special files are left out.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		}
		return nil
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
