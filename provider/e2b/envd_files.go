package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// Stat describes a path.
func (e *Envd) Stat(ctx context.Context, path string) (e2bwire.EntryInfo, error) {
	var r e2bwire.EntryResponse
	if err := e.unary(ctx, e2bwire.PathFilesystemStat, e2bwire.PathRequest{Path: path}, &r); err != nil {
		return e2bwire.EntryInfo{}, err
	}
	if r.Entry == nil {
		return e2bwire.EntryInfo{}, errors.New("stat: answer has no entry")
	}
	return *r.Entry, nil
}

// ListDir lists a directory (depth 1).
func (e *Envd) ListDir(ctx context.Context, path string) ([]e2bwire.EntryInfo, error) {
	var r e2bwire.ListDirResponse
	err := e.unary(ctx, e2bwire.PathFilesystemListDir, e2bwire.ListDirRequest{Path: path, Depth: 1}, &r)
	return r.Entries, err
}

// MakeDir creates a directory and its parents; an existing directory is success.
func (e *Envd) MakeDir(ctx context.Context, path string) error {
	err := e.unary(ctx, e2bwire.PathFilesystemMakeDir, e2bwire.PathRequest{Path: path}, nil)
	var ce *e2bwire.ConnectError
	if errors.As(err, &ce) && ce.Code == e2bwire.CodeAlreadyExists {
		return nil
	}
	return err
}

// Remove removes a file or a directory tree.
func (e *Envd) Remove(ctx context.Context, path string) error {
	return e.unary(ctx, e2bwire.PathFilesystemRemove, e2bwire.PathRequest{Path: path}, nil)
}

func (e *Envd) filesURL(path string) string {
	q := url.Values{"path": {path}, "username": {e.o.User}}
	return e.o.BaseURL + "/files?" + q.Encode()
}

// Upload writes a file (multipart/form-data, which every envd version accepts),
// creating its parent directories.
func (e *Envd) Upload(ctx context.Context, path string, data io.Reader) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", path)
		if err == nil {
			_, err = io.Copy(fw, data)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.filesURL(path), pr)
	if err != nil {
		pr.Close()
		return err
	}
	e.header(req.Header)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := e.o.HTTPClient.Do(req)
	if err != nil {
		pr.Close()
		return fmt.Errorf("upload %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return DecodeAPIError(resp.StatusCode, raw)
	}
	return nil
}

// WriteFile uploads data to path.
func (e *Envd) WriteFile(ctx context.Context, path string, data []byte) error {
	return e.Upload(ctx, path, bytes.NewReader(data))
}

// Download reads a file; a missing file is an *APIError with status 404.
func (e *Envd) Download(ctx context.Context, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.filesURL(path), nil)
	if err != nil {
		return err
	}
	e.header(req.Header)
	resp, err := e.o.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("download %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return DecodeAPIError(resp.StatusCode, raw)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("download %s: %w", path, err)
	}
	return nil
}

// ReadFile reads a whole file.
func (e *Envd) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var b bytes.Buffer
	err := e.Download(ctx, path, &b)
	return b.Bytes(), err
}
