package e2bserver

// envd's file calls run inside the sandbox, as commands of the sandbox's user, with
// the rights commands.run has there and no more. The engine's own file methods act
// with the engine's host privileges (root, every capability, reading
// /proc/1/environ of the sandbox's init, say); a file API that only a token holder
// can call must not hand out more than that token's commands can reach. Running
// each call as a small shell command is the one way that holds for any engine
// without a per-engine credential model: what the kernel refuses the sandbox's
// processes, it refuses the file API too. Content streams through the command's
// stdin and stdout, so no file is held whole in the server's memory.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/capped"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Exit codes of the file scripts; anything else is a failure with a message on
// stderr.
const (
	fsNotFound = 64 + iota
	fsIsDir
	fsNotDir
	fsExists
)

// fsError is a failed file call: the caller's mistake (a missing path, say), mapped
// to a 4xx and a Connect code.
type fsError struct {
	code string // a Connect code
	msg  string
}

func (e *fsError) Error() string { return e.msg }

// status is the HTTP status of the /files routes for e.
func (e *fsError) status() int { return (&e2bwire.ConnectError{Code: e.code}).HTTPStatus() }

// sandboxFS runs file calls in one engine sandbox.
type sandboxFS struct {
	eng engine.Engine
	eid string
}

// run runs script (sh -c) with args as $1…; exit codes above map to fsErrors about p.
func (f sandboxFS) run(ctx context.Context, p, script string, args []string, stdin io.Reader, stdout io.Writer) error {
	var stderr capped.Buffer
	stderr.Max = 2048
	argv := append([]string{"/bin/sh", "-c", "set -u\n" + script, "sh"}, args...)
	code, err := f.eng.Exec(ctx, f.eid, engine.ExecRequest{Argv: argv, Stdin: stdin, Stdout: stdout, Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("run file call in sandbox: %w", err)
	}
	switch code {
	case 0:
		return nil
	case fsNotFound:
		return &fsError{e2bwire.CodeNotFound, "path " + p + " does not exist"}
	case fsIsDir:
		return &fsError{e2bwire.CodeInvalidArgument, "path " + p + " is a directory"}
	case fsNotDir:
		return &fsError{e2bwire.CodeInvalidArgument, "path " + p + " is not a directory"}
	case fsExists:
		return &fsError{e2bwire.CodeAlreadyExists, "path " + p + " already exists"}
	}
	msg := strings.TrimSpace(stderr.String())
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if msg == "" {
		msg = "exit status " + strconv.Itoa(code)
	}
	c := e2bwire.CodeFailedPrecondition
	if strings.Contains(msg, "Permission denied") || strings.Contains(msg, "Read-only file system") ||
		strings.Contains(msg, "Operation not permitted") {
		c = e2bwire.CodePermissionDenied
	}
	return &fsError{c, strings.TrimPrefix(msg, "sh: ")}
}

// entryFormat is find's -printf of one entry: type, size, mode, mtime, owner, group,
// path, each NUL-terminated (paths may hold any byte but NUL).
const entryFormat = `%y\0%s\0%m\0%T@\0%u\0%g\0%p\0`

const entryFields = 7

// stat describes p, following symlinks (envd's Stat).
func (f sandboxFS) stat(ctx context.Context, p string) (e2bwire.EntryInfo, error) {
	var out bytes.Buffer
	err := f.run(ctx, p, `[ -e "$1" ] || exit 64
exec find -L "$1" -maxdepth 0 -printf "$2"`, []string{p, entryFormat}, nil, &out)
	if err != nil {
		return e2bwire.EntryInfo{}, err
	}
	es, err := parseEntries(out.Bytes())
	if err != nil || len(es) != 1 {
		return e2bwire.EntryInfo{}, fmt.Errorf("stat %s: unexpected output %q", p, out.String())
	}
	return es[0], nil
}

// maxListDir bounds one ListDir answer.
const maxListDir = 100000

// list lists dir's entries to depth (symlinks not followed), sorted by path; more
// than maxListed entries is an error.
func (f sandboxFS) list(ctx context.Context, dir string, depth, maxListed int) ([]e2bwire.EntryInfo, error) {
	out := &capped.Writer{W: new(bytes.Buffer), Left: 64 << 20}
	err := f.run(ctx, dir, `[ -e "$1" ] || exit 64
[ -d "$1" ] || exit 66
exec find "$1/" -mindepth 1 -maxdepth "$2" -printf "$3"`, []string{dir, strconv.Itoa(depth), entryFormat}, nil, out)
	if out.Over {
		return nil, &fsError{e2bwire.CodeInvalidArgument, "directory listing too large"}
	}
	if err != nil {
		return nil, err
	}
	es, err := parseEntries(out.W.(*bytes.Buffer).Bytes())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(es) > maxListed {
		return nil, &fsError{e2bwire.CodeInvalidArgument, "directory listing too large"}
	}
	slices.SortFunc(es, func(a, b e2bwire.EntryInfo) int { return strings.Compare(a.Path, b.Path) })
	return es, nil
}

// mkdir makes p and its parents; an existing p is fsExists (a directory) or fsNotDir.
func (f sandboxFS) mkdir(ctx context.Context, p string) error {
	return f.run(ctx, p, `if [ -e "$1" ]; then [ -d "$1" ] && exit 67; exit 66; fi
exec mkdir -p -- "$1"`, []string{p}, nil, nil)
}

// remove removes p, a file or a whole tree.
func (f sandboxFS) remove(ctx context.Context, p string) error {
	return f.run(ctx, p, `[ -e "$1" ] || [ -L "$1" ] || exit 64
[ "$(realpath -m -- "$1")" = / ] && { echo "refusing to remove /" >&2; exit 1; }
exec rm -rf -- "$1"`, []string{p}, nil, nil)
}

// move renames src to dst (replacing a file there), making dst's parents.
func (f sandboxFS) move(ctx context.Context, src, dst string) error {
	return f.run(ctx, src, `[ -e "$1" ] || [ -L "$1" ] || exit 64
mkdir -p -- "$(dirname -- "$2")" && exec mv -f -T -- "$1" "$2"`, []string{src, dst}, nil, nil)
}

// read streams regular file p to w; devices and pipes are refused (/dev/zero would
// never end).
func (f sandboxFS) read(ctx context.Context, p string, w io.Writer) error {
	return f.run(ctx, p, `[ -e "$1" ] || exit 64
[ -d "$1" ] && exit 65
[ -f "$1" ] || { echo "$1 is not a regular file" >&2; exit 1; }
exec cat -- "$1"`, []string{p}, nil, w)
}

// write streams r into p through a temporary file beside it; the file replaces p
// only when r ended cleanly (commit), so a cut or oversized upload leaves p as it was.
func (f sandboxFS) write(ctx context.Context, p string, r io.Reader, commit func() error) error {
	tmp := path.Join(path.Dir(p), ".e2b-upload-"+newID(8))
	err := f.run(ctx, p, `[ -d "$1" ] && exit 65
mkdir -p -- "$(dirname -- "$1")" || exit 1
exec cat > "$2"`, []string{p, tmp}, r, nil)
	if err == nil {
		err = commit()
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = f.run(cctx, tmp, `exec rm -f -- "$1"`, []string{tmp}, nil, nil)
		return err
	}
	return f.run(ctx, p, `exec mv -f -T -- "$2" "$1"`, []string{p, tmp}, nil, nil)
}

// parseEntries decodes find's output of entryFormat.
func parseEntries(b []byte) ([]e2bwire.EntryInfo, error) {
	fields := bytes.Split(b, []byte{0})
	if len(fields) > 0 && len(fields[len(fields)-1]) == 0 {
		fields = fields[:len(fields)-1]
	}
	if len(fields)%entryFields != 0 {
		return nil, errors.New("truncated entry list")
	}
	out := make([]e2bwire.EntryInfo, 0, len(fields)/entryFields)
	for i := 0; i < len(fields); i += entryFields {
		e, err := parseEntry(fields[i : i+entryFields])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func parseEntry(f [][]byte) (e2bwire.EntryInfo, error) {
	size, err1 := strconv.ParseInt(string(f[1]), 10, 64)
	perm, err2 := strconv.ParseUint(string(f[2]), 8, 32)
	secs, err3 := strconv.ParseFloat(string(f[3]), 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return e2bwire.EntryInfo{}, fmt.Errorf("bad entry %q: %w", f, err)
	}
	mode := fs.FileMode(perm & 0o777)
	t := e2bwire.FileTypeFile
	switch string(f[0]) {
	case "d":
		t, mode = e2bwire.FileTypeDirectory, mode|fs.ModeDir
	case "l":
		t, mode = e2bwire.FileTypeSymlink, mode|fs.ModeSymlink
	}
	p := path.Clean(string(f[6]))
	mt := time.Unix(0, int64(secs*1e9)).UTC()
	return e2bwire.EntryInfo{Name: path.Base(p), Type: t, Path: p, Size: e2bwire.Int64(size), Mode: uint32(perm & 0o777),
		Permissions: mode.String(), Owner: string(f[4]), Group: string(f[5]), ModifiedTime: &mt}, nil
}
