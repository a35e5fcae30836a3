package e2bserver

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/provider"

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

// sizeReader passes at most max bytes of r on and remembers how r ended, so a
// write commits only an upload that was read to its end within the limit. The
// engine's stdin copier reads it and the handler asks commit, so its state is
// locked.
type sizeReader struct {
	r   io.Reader
	max int64

	mu   sync.Mutex
	n    int64
	err  error // r's error other than io.EOF
	over bool
	eof  bool
}

func (s *sizeReader) Read(p []byte) (int, error) {
	s.mu.Lock()
	stop := s.over || s.err != nil
	s.mu.Unlock()
	if stop {
		return 0, errUploadAborted
	}
	n, err := s.r.Read(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += int64(n)
	switch {
	case s.n > s.max:
		s.over = true
		return 0, errUploadAborted
	case err == io.EOF:
		s.eof = true
	case err != nil:
		s.err = err
	}
	return n, err
}

var errUploadAborted = errors.New("upload aborted")

// commit says whether the upload may replace the file.
func (s *sizeReader) commit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.over:
		return &fsError{"resource_exhausted", fmt.Sprintf("file is larger than %d bytes", s.max)}
	case s.err != nil:
		return &fsError{e2bwire.CodeInvalidArgument, "read upload: " + s.err.Error()}
	case !s.eof:
		return &fsError{e2bwire.CodeInvalidArgument, "upload ended early"}
	}
	return nil
}

// lazyBody sends the download's headers with its first byte, so a call that fails
// before any can still answer an error.
type lazyBody struct {
	w       http.ResponseWriter
	name    string
	started bool
}

func (b *lazyBody) Write(p []byte) (int, error) {
	b.start()
	return b.w.Write(p)
}

func (b *lazyBody) start() {
	if !b.started {
		b.started = true
		b.w.Header().Set("Content-Type", "application/octet-stream")
		b.w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": b.name}))
		b.w.WriteHeader(http.StatusOK)
	}
}

// filesFail answers a /files error; fsErrors are the caller's (4xx), the rest are
// logged and answered 500.
func (c envdCall) filesFail(w http.ResponseWriter, err error) {
	var fe *fsError
	if errors.As(err, &fe) {
		st := fe.status()
		if fe.code == "resource_exhausted" {
			st = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, st, e2bwire.APIError{Code: st, Message: fe.msg})
		return
	}
	c.s.log.Error("files", "sandbox_id", c.sb.id, "err", err)
	writeJSON(w, http.StatusInternalServerError, e2bwire.APIError{Code: 500, Message: "internal error"})
}

func (c envdCall) download(w http.ResponseWriter, r *http.Request) {
	p := resolve(r.URL.Query().Get("path"))
	body := &lazyBody{w: w, name: path.Base(p)}
	err := c.fs().read(r.Context(), p, body)
	if err != nil && !body.started {
		c.filesFail(w, err)
		return
	}
	if err != nil {
		// Headers are gone: cut the body so the client sees a broken transfer.
		c.s.log.Warn("download cut", "sandbox_id", c.sb.id, "path", p, "err", err)
		panic(http.ErrAbortHandler)
	}
	body.start()
}

// partFileName is a part's file name as sent: mime/multipart's FileName strips the
// directories, and envd keeps them (files.write([{path, data}, …]) names each part
// by its full path).
func partFileName(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

func (c envdCall) upload(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		writeJSON(w, status, e2bwire.APIError{Code: status, Message: msg})
	}
	// At most MaxUploads stream at once; the others wait unread, holding no memory.
	select {
	case c.s.uploads <- struct{}{}:
		defer func() { <-c.s.uploads }()
	case <-r.Context().Done():
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(body)
		if err != nil {
			fail(http.StatusBadRequest, "invalid gzip body")
			return
		}
		// No Close: after a failed write the engine's stdin copier may still be
		// reading zr (it reads until its Read returns), and Close would race it; a
		// gzip.Reader holds nothing that needs closing.
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
		p := resolve(name)
		sr := &sizeReader{r: src, max: c.s.o.MaxUpload}
		if err := c.fs().write(r.Context(), p, bufio.NewReaderSize(sr, 64<<10), sr.commit); err != nil {
			c.filesFail(w, err)
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
				name = partFileName(part)
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
