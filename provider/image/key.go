package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Sources say where the files of copy and binary steps come from in one build or
// rendering. Their hashes are part of the keys, so a changed file changes its step's
// key. Empty Sources key the definition alone (binaries by name).
type Sources struct {
	// Context is the host folder copy steps' Src are relative to.
	Context string
	// Binaries maps a binary step's name to its host file (local builds).
	Binaries map[string]string
	// BinaryURLs maps a binary step's name to the URL Modal downloads it from.
	BinaryURLs map[string]string
}

// BaseKey is the key of the base alone: from is the base's reference, or in a local
// build the id of the resolved base image (so a rebuilt base changes every key).
func BaseKey(from string) string { return hashStrings("FROM", from) }

// Keys are the content keys of img's steps in order: each hashes its parent's key (the
// base's for the first), its canonical form and the hash of the files it copies.
func (img Image) Keys(base string, src Sources) ([]string, error) {
	keys := make([]string, len(img.Steps))
	parent := BaseKey(base)
	for i, s := range img.Steps {
		files, err := s.filesHash(src)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i+1, err)
		}
		parent = hashStrings(parent, s.Canonical(), files)
		keys[i] = parent
	}
	return keys, nil
}

// Key is the key of the whole image: its last step's, the base's without steps. It
// also covers Expose and Cmd.
func (img Image) Key(base string, src Sources) (string, error) {
	keys, err := img.Keys(base, src)
	if err != nil {
		return "", err
	}
	last := BaseKey(base)
	if len(keys) > 0 {
		last = keys[len(keys)-1]
	}
	return hashStrings(last, fmt.Sprint(img.Expose), strings.Join(img.Cmd, "\x00")), nil
}

// filesHash is the hash of what the step copies: the tree under Context/Src, a binary's
// file, else its URL; empty when Sources do not say.
func (s Step) filesHash(src Sources) (string, error) {
	switch s.Kind {
	case KindCopy:
		if src.Context == "" {
			return "", nil
		}
		return hashTree(filepath.Join(src.Context, filepath.FromSlash(s.Src)))
	case KindBinary:
		if f := src.Binaries[s.Name]; f != "" {
			return hashFile(f)
		}
		if u := src.BinaryURLs[s.Name]; u != "" {
			return "url " + u, nil
		}
	}
	return "", nil
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hashFile(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashTree hashes a file or folder: every entry's relative path, mode, and content or
// link target, in lexical order.
func hashTree(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s\x00%o\x00", filepath.ToSlash(rel), info.Mode())
		switch {
		case info.Mode().IsRegular():
			sum, err := hashFile(p)
			if err != nil {
				return err
			}
			h.Write([]byte(sum))
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Write([]byte(target))
		}
		h.Write([]byte{'\n'})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash copy source: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
