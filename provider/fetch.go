package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// DefaultTimeouts are the suggested bounds of provider operations.
type DefaultTimeouts struct {
	CreateSandbox, Snapshot, Terminate, WriteEnvFile, Health, CheckSandboxes time.Duration
}

// Timeouts returns the default operation timeouts.
func Timeouts() DefaultTimeouts {
	return DefaultTimeouts{
		CreateSandbox:  180 * time.Second,
		Snapshot:       120 * time.Second,
		Terminate:      30 * time.Second,
		WriteEnvFile:   30 * time.Second,
		Health:         10 * time.Second,
		CheckSandboxes: 30 * time.Second,
	}
}

// DefaultFetchTimeout bounds a provider API request when the caller gives none.
const DefaultFetchTimeout = 30 * time.Second

// Fetch sends req with client under timeout (DefaultFetchTimeout when <= 0) and
// returns the response of a 2xx; the caller closes its body. A non-2xx becomes
// FromHTTPResponse, a timeout "Request timeout after <ms>ms: <url>" (retryable), and
// any other failure FromError; the caller's own cancellation stays a cancellation.
func Fetch(ctx context.Context, client *http.Client, req *http.Request, provider Kind, op Operation, timeout time.Duration) (*http.Response, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, errFetchTimeout)
	resp, err := client.Do(req.WithContext(tctx))
	if err != nil {
		cancel()
		if errors.Is(context.Cause(tctx), errFetchTimeout) && ctx.Err() == nil {
			e := FromError(fmt.Errorf("Request timeout after %dms: %s: %w", timeout.Milliseconds(), req.URL.Redacted(), context.DeadlineExceeded), provider, op)
			return nil, e
		}
		return nil, FromError(err, provider, op)
	}
	if resp.StatusCode/100 != 2 {
		defer cancel()
		defer resp.Body.Close()
		return nil, FromHTTPResponse(resp, provider, op)
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

var errFetchTimeout = errors.New("fetch timeout")

// cancelBody releases the request's timeout when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
