package e2b

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// DefaultUser is the user envd runs commands and file operations as.
const DefaultUser = "user"

// EnvdOptions configure an Envd client.
type EnvdOptions struct {
	// BaseURL is envd's URL, https://49983-<id>.<domain> or a routing proxy.
	BaseURL string
	// SandboxID is sent as E2b-Sandbox-Id so a shared URL can route the call.
	SandboxID string
	// AccessToken is the sandbox's envd access token (X-Access-Token); empty for an
	// unsecured sandbox.
	AccessToken string
	// User runs the commands; empty means DefaultUser.
	User string
	// HTTPClient is used for every call; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// Envd is a client of one sandbox's envd. It is safe for concurrent use.
type Envd struct {
	o EnvdOptions
}

// NewEnvd returns an envd client.
func NewEnvd(o EnvdOptions) *Envd {
	o.BaseURL = strings.TrimRight(o.BaseURL, "/")
	if o.User == "" {
		o.User = DefaultUser
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	return &Envd{o: o}
}

func (e *Envd) header(h http.Header) {
	if e.o.AccessToken != "" {
		h.Set("X-Access-Token", e.o.AccessToken)
	}
	h.Set("E2b-Sandbox-Id", e.o.SandboxID)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(e2bwire.EnvdPort))
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(e.o.User+":")))
}

// Health is GET /health; envd answers 204 when it is up.
func (e *Envd) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.o.BaseURL+"/health", nil)
	if err != nil {
		return err
	}
	e.header(req.Header)
	resp, err := e.o.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("envd health: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return &e2bwire.APIError{Status: resp.StatusCode, Message: "envd health"}
	}
	return nil
}

// unary makes one unary Connect call.
func (e *Envd) unary(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.o.BaseURL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	e.header(req.Header)
	req.Header.Set("Content-Type", e2bwire.ContentTypeJSON)
	req.Header.Set(e2bwire.HeaderProtocolVersion, "1")
	resp, err := e.o.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("envd %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("envd %s: read response: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return DecodeConnectError(resp.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("envd %s: decode response: %w", path, err)
	}
	return nil
}

// DecodeConnectError builds the error of a failed unary call.
func DecodeConnectError(status int, body []byte) *e2bwire.ConnectError {
	var ce e2bwire.ConnectError
	if json.Unmarshal(body, &ce) != nil || ce.Code == "" {
		ce = e2bwire.ConnectError{Code: e2bwire.CodeForHTTPStatus(status), Message: strings.TrimSpace(string(body))}
		if len(ce.Message) > 500 {
			ce.Message = ce.Message[:500]
		}
		if ce.Message == "" {
			ce.Message = http.StatusText(status)
		}
	}
	return &ce
}
