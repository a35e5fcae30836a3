package modalserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// fsToolsPath is the program the SDKs exec for their filesystem calls. Modal ships it
// in every sandbox; the local server answers it itself, through the engine's file
// calls, with the same JSON command, stdout and error payload.
const fsToolsPath = "/__modal/.bin/modal-sandbox-fs-tools"

// File sizes the filesystem calls take: the largest file ReadFile returns and
// WriteFile takes (FileTooLarge beyond), and how many uploads are held at once.
const (
	maxReadFile       = 100 << 20
	maxWriteFile      = 100 << 20
	concurrentUploads = 4
)

type fsPathArgs struct {
	Path      string `json:"path"`
	Parents   bool   `json:"parents"`
	Recursive bool   `json:"recursive"`
}

type fsCommand struct {
	ListFiles     *fsPathArgs `json:"ListFiles"`
	MakeDirectory *fsPathArgs `json:"MakeDirectory"`
	ReadFile      *fsPathArgs `json:"ReadFile"`
	WriteFile     *fsPathArgs `json:"WriteFile"`
	Remove        *fsPathArgs `json:"Remove"`
	Stat          *fsPathArgs `json:"Stat"`
}

// fsFileInfo is the tool's JSON shape of a file (the SDKs' FileInfo).
type fsFileInfo struct {
	Name          string  `json:"name"`
	Path          string  `json:"path"`
	Type          string  `json:"type"`
	Size          int64   `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  float64 `json:"modified_time"`
	SymlinkTarget *string `json:"symlink_target"`
}

type fsError struct {
	Kind    string `json:"error_kind"`
	Message string `json:"message"`
	Detail  string `json:"detail,omitempty"`
}

func (e *fsError) Error() string { return e.Kind + ": " + e.Message }

func toFSInfo(fi engine.FileInfo) fsFileInfo {
	mode := fs.FileMode(fi.Mode)
	t := "file"
	switch {
	case fi.IsDir || mode.IsDir():
		t = "directory"
	case mode&fs.ModeSymlink != 0:
		t = "symlink"
	}
	return fsFileInfo{Name: fi.Name, Path: fi.Path, Type: t, Size: fi.Size, Mode: uint32(mode.Perm()),
		Permissions: mode.Perm().String(), Owner: "user", Group: "user",
		ModifiedTime: float64(fi.ModTime.UnixNano()) / 1e9}
}

// classify maps an engine file error to the tool's error kinds: by engine's sentinels,
// or by the text of an engine without Capabilities.FileErrors.
func classify(err error, op string) *fsError {
	msg := op + " failed"
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, engine.ErrNotFound):
		return &fsError{Kind: "NotFound", Message: "No such file or directory", Detail: err.Error()}
	case errors.Is(err, fs.ErrPermission):
		return &fsError{Kind: "PermissionDenied", Message: "Permission denied", Detail: err.Error()}
	case errors.Is(err, fs.ErrExist):
		return &fsError{Kind: "PathAlreadyExists", Message: "File exists", Detail: err.Error()}
	case errors.Is(err, engine.ErrIsDir), strings.Contains(err.Error(), "is a directory"):
		return &fsError{Kind: "IsDirectory", Message: "Is a directory", Detail: err.Error()}
	case errors.Is(err, engine.ErrNotDir), strings.Contains(err.Error(), "not a directory"):
		return &fsError{Kind: "NotDirectory", Message: "Not a directory", Detail: err.Error()}
	case errors.Is(err, engine.ErrNotEmpty), strings.Contains(err.Error(), "directory not empty"):
		return &fsError{Kind: "DirectoryNotEmpty", Message: "Directory not empty", Detail: err.Error()}
	}
	return &fsError{Kind: "Other", Message: msg + ": " + err.Error()}
}

// fsTool runs one filesystem command and returns the tool's exit code.
func (s *Server) fsTool(ctx context.Context, sb *sandbox, arg string, stdin io.Reader, stdout, stderr io.Writer) int {
	out, err := s.fsRun(ctx, sb.engineID, arg, stdin)
	if err != nil {
		var fe *fsError
		if !errors.As(err, &fe) {
			fe = &fsError{Kind: "Other", Message: err.Error()}
		}
		b, _ := json.Marshal(fe)
		stderr.Write(b)
		return 1
	}
	if out != nil {
		stdout.Write(out)
	}
	return 0
}

// parseFSCommand reads the tool's one JSON argument: exactly one command with an
// absolute path, which it returns cleaned.
func parseFSCommand(arg string) (string, fsPathArgs, error) {
	var c fsCommand
	if err := json.Unmarshal([]byte(arg), &c); err != nil {
		return "", fsPathArgs{}, &fsError{Kind: "InvalidArgument", Message: "bad command: " + err.Error()}
	}
	var op string
	var a *fsPathArgs
	for name, v := range map[string]*fsPathArgs{"ReadFile": c.ReadFile, "WriteFile": c.WriteFile, "ListFiles": c.ListFiles,
		"Stat": c.Stat, "MakeDirectory": c.MakeDirectory, "Remove": c.Remove} {
		if v != nil {
			if a != nil {
				return "", fsPathArgs{}, &fsError{Kind: "InvalidArgument", Message: "more than one command"}
			}
			op, a = name, v
		}
	}
	if a == nil {
		return "", fsPathArgs{}, &fsError{Kind: "NotSupported", Message: "command not supported by the local Modal server: " + arg}
	}
	if !strings.HasPrefix(a.Path, "/") {
		return "", fsPathArgs{}, &fsError{Kind: "InvalidArgument", Message: "path must be absolute"}
	}
	out := *a
	out.Path = path.Clean(a.Path)
	return op, out, nil
}

func (s *Server) fsRun(ctx context.Context, id, arg string, stdin io.Reader) ([]byte, error) {
	op, a, err := parseFSCommand(arg)
	if err != nil {
		return nil, err
	}
	e := s.o.Engine
	p := a.Path
	switch op {
	case "ReadFile":
		fi, err := e.Stat(ctx, id, p)
		if err != nil {
			return nil, classify(err, "read")
		}
		if fi.IsDir {
			return nil, &fsError{Kind: "IsDirectory", Message: "Is a directory"}
		}
		if fi.Size > maxReadFile {
			return nil, &fsError{Kind: "FileTooLarge", Message: "File is too large to read"}
		}
		data, err := e.ReadFile(ctx, id, p)
		if err != nil {
			return nil, classify(err, "read")
		}
		return data, nil
	case "WriteFile":
		return nil, s.fsWrite(ctx, id, p, stdin)
	case "ListFiles":
		fi, err := e.Stat(ctx, id, p)
		if err != nil {
			return nil, classify(err, "list")
		}
		if !fi.IsDir {
			return nil, &fsError{Kind: "NotDirectory", Message: "Not a directory"}
		}
		list, err := e.ListFiles(ctx, id, p)
		if err != nil {
			return nil, classify(err, "list")
		}
		out := make([]fsFileInfo, 0, len(list))
		for _, f := range list {
			out = append(out, toFSInfo(f))
		}
		return json.Marshal(out)
	case "Stat":
		fi, err := e.Stat(ctx, id, p)
		if err != nil {
			return nil, classify(err, "stat")
		}
		return json.Marshal(toFSInfo(fi))
	case "MakeDirectory":
		if !a.Parents {
			if _, err := e.Stat(ctx, id, p); err == nil {
				return nil, &fsError{Kind: "PathAlreadyExists", Message: "File exists"}
			}
			if fi, err := e.Stat(ctx, id, path.Dir(p)); err != nil {
				return nil, classify(err, "mkdir")
			} else if !fi.IsDir {
				return nil, &fsError{Kind: "NotDirectory", Message: "Not a directory"}
			}
		}
		if err := e.MkdirAll(ctx, id, p); err != nil {
			return nil, classify(err, "mkdir")
		}
		return nil, nil
	case "Remove":
		fi, err := e.Stat(ctx, id, p)
		if err != nil {
			return nil, classify(err, "remove")
		}
		if fi.IsDir && !a.Recursive {
			list, err := e.ListFiles(ctx, id, p)
			if err != nil {
				return nil, classify(err, "remove")
			}
			if len(list) > 0 {
				return nil, &fsError{Kind: "DirectoryNotEmpty", Message: "Directory not empty"}
			}
		}
		if err := e.Remove(ctx, id, p); err != nil {
			return nil, classify(err, "remove")
		}
		return nil, nil
	}
	return nil, &fsError{Kind: "NotSupported", Message: "command not supported by the local Modal server: " + arg}
}

// fsWrite writes stdin to p. The engine takes a file whole: an upload is held in
// memory, so its size and the number held at once are bounded.
func (s *Server) fsWrite(ctx context.Context, id, p string, stdin io.Reader) error {
	e := s.o.Engine
	select {
	case s.uploads <- struct{}{}:
		defer func() { <-s.uploads }()
	case <-ctx.Done():
		return ctx.Err()
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxWriteFile+1))
	if err != nil {
		return &fsError{Kind: "Other", Message: "reading stdin: " + err.Error()}
	}
	if len(data) > maxWriteFile {
		return &fsError{Kind: "FileTooLarge", Message: fmt.Sprintf("File is too large to write: the local Modal server takes at most %d MiB at once", maxWriteFile>>20)}
	}
	if fi, err := e.Stat(ctx, id, p); err == nil && fi.IsDir {
		return &fsError{Kind: "IsDirectory", Message: "Is a directory"}
	}
	if err := e.WriteFile(ctx, id, p, data, 0o644); err != nil {
		return classify(err, "write")
	}
	return nil
}
