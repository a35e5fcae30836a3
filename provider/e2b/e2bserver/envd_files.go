package e2bserver

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// resolve makes an envd path absolute: relative paths are under the user's home.
func resolve(p string) string {
	if p == "" {
		return provider.HomeDir
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = provider.HomeDir + p[1:]
	}
	if !path.IsAbs(p) {
		p = path.Join(provider.HomeDir, p)
	}
	return path.Clean(p)
}

func entry(fi engine.FileInfo) e2bwire.EntryInfo {
	t := e2bwire.FileTypeFile
	mode := fs.FileMode(fi.Mode)
	switch {
	case fi.IsDir:
		t = e2bwire.FileTypeDirectory
	case mode&fs.ModeSymlink != 0:
		t = e2bwire.FileTypeSymlink
	}
	mt := fi.ModTime.UTC()
	return e2bwire.EntryInfo{Name: fi.Name, Type: t, Path: fi.Path, Size: e2bwire.Int64(fi.Size), Mode: uint32(mode.Perm()),
		Permissions: mode.String(), Owner: "user", Group: "user", ModifiedTime: &mt}
}

func (c envdCall) walk(ctx context.Context, dir string, depth int, out *[]e2bwire.EntryInfo) error {
	if len(*out) > 100000 {
		return &connectErr{e2bwire.CodeInvalidArgument, "directory listing too large"}
	}
	fis, err := c.s.o.Engine.ListFiles(ctx, c.eid, dir)
	if err != nil {
		return err
	}
	for _, fi := range fis {
		*out = append(*out, entry(fi))
		if fi.IsDir && depth > 1 {
			if err := c.walk(ctx, fi.Path, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// fileErr maps a file operation's error, keeping "not found" a not_found.
func fileErr(p string, err error) error {
	if errors.Is(err, engine.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err) {
		return &connectErr{e2bwire.CodeNotFound, "path " + p + " does not exist"}
	}
	return err
}

func (c envdCall) download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("path")
	p := resolve(q)
	eng := c.s.o.Engine
	fi, err := eng.Stat(r.Context(), c.eid, p)
	if err != nil {
		if fileErr(q, err) != err {
			writeJSON(w, http.StatusNotFound, e2bwire.APIError{Code: 404, Message: "path '" + p + "' does not exist"})
			return
		}
		writeJSON(w, http.StatusInternalServerError, e2bwire.APIError{Code: 500, Message: "stat " + p})
		return
	}
	if fi.IsDir {
		writeJSON(w, http.StatusBadRequest, e2bwire.APIError{Code: 400, Message: "path '" + p + "' is a directory"})
		return
	}
	data, err := eng.ReadFile(r.Context(), c.eid, p)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, e2bwire.APIError{Code: 500, Message: "read " + p})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}

func (c envdCall) upload(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		writeJSON(w, status, e2bwire.APIError{Code: status, Message: msg})
	}
	body := io.Reader(http.MaxBytesReader(w, r.Body, c.s.o.MaxUpload+1<<20))
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(body)
		if err != nil {
			fail(http.StatusBadRequest, "invalid gzip body")
			return
		}
		defer zr.Close()
		body = zr
	}
	qpath := r.URL.Query().Get("path")
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		fail(http.StatusBadRequest, "missing or invalid content type")
		return
	}
	var written []e2bwire.FileEntry
	write := func(name string, src io.Reader) bool {
		data, err := io.ReadAll(io.LimitReader(src, c.s.o.MaxUpload+1))
		if err != nil {
			fail(http.StatusBadRequest, "read upload: "+err.Error())
			return false
		}
		if int64(len(data)) > c.s.o.MaxUpload {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("file is larger than %d bytes", c.s.o.MaxUpload))
			return false
		}
		p := resolve(name)
		if fi, err := c.s.o.Engine.Stat(r.Context(), c.eid, p); err == nil && fi.IsDir {
			fail(http.StatusBadRequest, "path '"+p+"' is a directory")
			return false
		}
		if err := c.s.o.Engine.WriteFile(r.Context(), c.eid, p, data, 0o644); err != nil {
			c.s.log.Error("upload", "sandbox_id", c.sb.id, "path", p, "err", err)
			fail(http.StatusInternalServerError, "error writing file '"+p+"'")
			return false
		}
		written = append(written, e2bwire.FileEntry{Path: p, Name: path.Base(p), Type: "file"})
		return true
	}
	switch ct {
	case "application/octet-stream":
		if qpath == "" {
			fail(http.StatusBadRequest, "path is required for an octet-stream upload")
			return
		}
		if !write(qpath, body) {
			return
		}
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				fail(http.StatusBadRequest, "invalid multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			name := qpath
			if name == "" || len(written) > 0 {
				name = part.FileName()
			}
			if name == "" {
				fail(http.StatusBadRequest, "a file part needs a path or a file name")
				return
			}
			if !write(name, part) {
				return
			}
		}
	default:
		fail(http.StatusBadRequest, "content type must be multipart/form-data or application/octet-stream")
		return
	}
	if len(written) == 0 {
		fail(http.StatusBadRequest, "no file in the upload")
		return
	}
	writeJSON(w, http.StatusOK, written)
}
