package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// BundleContentType is the media type of a git bundle on the wire.
const BundleContentType = apitype.GitBundleContentType

// BundleInfo describes a bundle GitBundle received (Size: bytes written).
type BundleInfo = apitype.GitBundleInfo

// GitBundle calls GET /api/git/bundle?repo=id[&base=rev] and copies the bundle
// into w. The transfer is bounded by ctx only (a bundle may be large); a 409
// *APIError means there is nothing since base.
func (c *Client) GitBundle(ctx context.Context, repoID, base string, w io.Writer) (BundleInfo, error) {
	q := url.Values{"repo": {repoID}}
	if base != "" {
		q.Set("base", base)
	}
	resp, err := c.raw(ctx, http.MethodGet, "/api/git/bundle?"+q.Encode(), "", nil)
	if err != nil {
		return BundleInfo{}, err
	}
	defer resp.Body.Close()
	info := BundleInfo{Branch: resp.Header.Get(apitype.HeaderGitBranch), Head: resp.Header.Get(apitype.HeaderGitHead)}
	n, err := io.Copy(w, resp.Body)
	info.Size = n
	if err != nil {
		return info, fmt.Errorf("read bundle: %w", err)
	}
	if want := resp.ContentLength; want >= 0 && n != want {
		return info, fmt.Errorf("read bundle: got %d of %d bytes", n, want)
	}
	return info, nil
}

// GitApplyBundle calls POST /api/git/bundle?repo=id with the bundle read from
// r: the sandbox fetches its branches into refs/remotes/origin/*.
func (c *Client) GitApplyBundle(ctx context.Context, repoID string, r io.Reader) ([]apitype.GitRefUpdate, error) {
	resp, err := c.raw(ctx, http.MethodPost, "/api/git/bundle?"+url.Values{"repo": {repoID}}.Encode(), BundleContentType, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out apitype.GitBundleApplyResponse
	if err := decodeBody(resp, &out); err != nil {
		return nil, err
	}
	return out.Updated, nil
}

// GitChangeset calls GET /api/git/changeset?repo=id&base=rev.
func (c *Client) GitChangeset(ctx context.Context, repoID, base string) (apitype.GitChangesetResponse, error) {
	var out apitype.GitChangesetResponse
	err := c.call(ctx, http.MethodGet, "/api/git/changeset?"+url.Values{"repo": {repoID}, "base": {base}}.Encode(), nil, &out)
	return out, err
}

// raw sends one request with a raw body (no retry: a stream cannot be
// replayed) and returns a 2xx response; any other status is an *APIError.
func (c *Client) raw(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Response, error) {
	req, err := c.newRequest(ctx, method, path, contentType, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, unwrapURL(err))
	}
	if resp.StatusCode >= 400 {
		return nil, readAPIError(resp)
	}
	return resp, nil
}

func decodeBody(resp *http.Response, out any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode response (%s bytes): %w", strconv.Itoa(len(b)), err)
	}
	return nil
}
