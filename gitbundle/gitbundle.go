// Package gitbundle takes in git bundles that come from the other side: the
// host reads bundles out of a sandbox (provider/gitpush), the sidecar reads
// bundles POSTed to it (internal/gitrepo), and both treat them as hostile.
//
//   - Parse reads the header (v2 and v3): the commits it requires and the
//     refs it carries; bounded size, strict syntax, no trust in ref names.
//   - ScanPack checks the pack's declared object sizes against Limits before
//     git inflates anything (a zip bomb is refused on its declarations).
//   - Receive writes the objects with index-pack --strict (fsck, .gitmodules
//     included) into a quarantine object directory of the repository; the
//     objects join the repository on Accept and vanish on Drop, so a refused
//     bundle leaves nothing behind.
//   - CheckPath refuses the paths no checkout should hold (".git" as any
//     file system may spell it).
//
// It is a leaf both sides import: stdlib, gitexec and nothing of
// provider.
package gitbundle

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits of a header the parser accepts.
const (
	MaxHeaderBytes = 1 << 20
	MaxRefs        = 10000
)

// ErrNotBundle means the input does not start like a git bundle.
var ErrNotBundle = errors.New("not a git bundle")

// Prerequisite is a commit the receiver must already have.
type Prerequisite struct {
	OID     string
	Comment string
}

// Ref is a ref the bundle carries.
type Ref struct {
	OID  string
	Name string
}

// Header is a parsed bundle header.
type Header struct {
	Version int // 2 or 3
	// Capabilities are v3's "@key[=value]" lines.
	Capabilities  map[string]string
	Prerequisites []Prerequisite
	Refs          []Ref
	// Len is the header's length in bytes; the pack data follows it.
	Len int
}

// ObjectFormat is "sha1" unless the bundle says otherwise.
func (h Header) ObjectFormat() string {
	if f := h.Capabilities["object-format"]; f != "" {
		return f
	}
	return "sha1"
}

// Parse reads a bundle header from r (at most MaxHeaderBytes, never more than
// the header plus what bufio buffers).
func Parse(r io.Reader) (Header, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, MaxHeaderBytes), 64<<10)
	var h Header
	line, err := readLine(br, &h)
	if err != nil {
		return h, ErrNotBundle
	}
	switch line {
	case "# v2 git bundle":
		h.Version = 2
	case "# v3 git bundle":
		h.Version = 3
	default:
		return h, ErrNotBundle
	}
	hexLen := 40
	for {
		line, err := readLine(br, &h)
		if err != nil {
			return h, err
		}
		if line == "" {
			break
		}
		switch {
		case line[0] == '@':
			if h.Version < 3 {
				return h, fmt.Errorf("bundle header: capability %q in a v2 bundle", trunc(line))
			}
			if len(h.Prerequisites) > 0 || len(h.Refs) > 0 {
				return h, fmt.Errorf("bundle header: capability %q after refs", trunc(line))
			}
			k, v, _ := strings.Cut(line[1:], "=")
			if k == "" {
				return h, errors.New("bundle header: empty capability")
			}
			if h.Capabilities == nil {
				h.Capabilities = map[string]string{}
			}
			h.Capabilities[k] = v
			if k == "object-format" {
				switch v {
				case "sha1":
					hexLen = 40
				case "sha256":
					hexLen = 64
				default:
					return h, fmt.Errorf("bundle header: unknown object format %q", trunc(v))
				}
			}
		case line[0] == '-':
			oid, comment, _ := strings.Cut(line[1:], " ")
			if !isOID(oid, hexLen) {
				return h, fmt.Errorf("bundle header: bad prerequisite %q", trunc(line))
			}
			h.Prerequisites = append(h.Prerequisites, Prerequisite{OID: oid, Comment: comment})
		default:
			oid, name, ok := strings.Cut(line, " ")
			if !ok || !isOID(oid, hexLen) || !ValidRefName(name) {
				return h, fmt.Errorf("bundle header: bad ref line %q", trunc(line))
			}
			h.Refs = append(h.Refs, Ref{OID: oid, Name: name})
		}
		if len(h.Refs)+len(h.Prerequisites) > MaxRefs {
			return h, fmt.Errorf("bundle header: more than %d refs", MaxRefs)
		}
	}
	if len(h.Refs) == 0 {
		return h, errors.New("bundle header: no refs")
	}
	return h, nil
}

// readLine reads one LF-terminated line and counts it into h.Len.
func readLine(br *bufio.Reader, h *Header) (string, error) {
	b, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", errors.New("bundle header: line too long")
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", errors.New("bundle header: truncated")
		}
		return "", err
	}
	h.Len += len(b)
	b = bytes.TrimSuffix(b, []byte{'\n'})
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return "", errors.New("bundle header: control character")
		}
	}
	return string(b), nil
}

func isOID(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidRefName is a conservative subset of git check-ref-format: "HEAD" or a
// name under refs/ with no empty, dot-leading or ".lock" components, no "..",
// "@{", spaces, control or glob characters.
func ValidRefName(name string) bool {
	if name == "HEAD" {
		return true
	}
	if !strings.HasPrefix(name, "refs/") || len(name) > 1024 || strings.Contains(name, "..") || strings.Contains(name, "@{") ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") {
		return false
	}
	for _, c := range name {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c) {
			return false
		}
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part[0] == '.' || strings.HasSuffix(part, ".lock") {
			return false
		}
	}
	return true
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
