package gateway

// Registration over HTTP, for a gateway in another process: AdminHandler serves it on
// a listener of its own (never the sandboxes'), behind a bearer token; Client calls it.
//
//	PUT    /v1/sandboxes/{id}     {"secrets":[{"name","value","hosts"}],"ttl_seconds":n} → Registration
//	DELETE /v1/sandboxes/{id}
//	PUT    /v1/bindings/{sandbox} {"id":"<registration id>"}   (Bind)
//	PATCH  /v1/bindings/{sandbox} {"ttl_seconds":n}            (Extend)
//	DELETE /v1/bindings/{sandbox}                              (UnregisterSandbox)
//
// ttl_seconds is a lifetime in whole seconds, 0 (none) to rules.MaxGatewayTTL.

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// wireSecret carries a value, which engine.Secret never serializes.
type wireSecret struct {
	Name  string   `json:"name"`
	Value string   `json:"value"`
	Hosts []string `json:"hosts"`
}

type registerRequest struct {
	Secrets    []wireSecret `json:"secrets"`
	TTLSeconds int64        `json:"ttl_seconds,omitempty"`
}

type bindRequest struct {
	ID string `json:"id"`
}

type extendRequest struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

const maxAdminBody = 1 << 20

// httpError is an error with the status it answers.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func badRequest(err error) error { return &httpError{http.StatusBadRequest, err} }

// decode reads r's JSON body into v (at most maxAdminBody); a bad body is a 400.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody)).Decode(v); err != nil {
		return badRequest(fmt.Errorf("decode the request: %w", err))
	}
	return nil
}

// decodeTTL decodes r's body into v (decode) and returns *secs, a field of v, as a
// lifetime (ttl).
func decodeTTL(w http.ResponseWriter, r *http.Request, v any, secs *int64) (time.Duration, error) {
	if err := decode(w, r, v); err != nil {
		return 0, err
	}
	return ttl(*secs)
}

// ttl is n seconds as a lifetime, refused (400) outside 0 to rules.MaxGatewayTTL.
func ttl(n int64) (time.Duration, error) {
	if n < 0 || n > int64(rules.MaxGatewayTTL/time.Second) {
		return 0, badRequest(fmt.Errorf("ttl_seconds %d is outside 0 (none) to %d", n, int64(rules.MaxGatewayTTL/time.Second)))
	}
	return time.Duration(n) * time.Second, nil
}

// seconds is d in whole seconds, rounded up, as ttl_seconds carries it.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// AdminHandler serves registration for g to callers with token.
func AdminHandler(g Registrar, token string) (http.Handler, error) {
	if len(token) < 16 {
		return nil, errors.New("gateway admin: a token of at least 16 characters is required")
	}
	mux := http.NewServeMux()
	handle := func(pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				writeErr(w, err)
			}
		})
	}
	handle("PUT /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) error {
		var req registerRequest
		d, err := decodeTTL(w, r, &req, &req.TTLSeconds)
		if err != nil {
			return err
		}
		list := make([]engine.Secret, 0, len(req.Secrets))
		for _, s := range req.Secrets {
			list = append(list, engine.Secret{Name: s.Name, Value: s.Value, Hosts: s.Hosts})
		}
		reg, err := g.Register(r.Context(), r.PathValue("id"), list, d)
		if err != nil {
			return badRequest(err)
		}
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(reg)
	})
	handle("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) error {
		return noContent(w, g.Unregister(r.Context(), r.PathValue("id")))
	})
	handle("PUT /v1/bindings/{sandbox}", func(w http.ResponseWriter, r *http.Request) error {
		var req bindRequest
		if err := decode(w, r, &req); err != nil {
			return err
		}
		err := g.Bind(r.Context(), req.ID, r.PathValue("sandbox"))
		if errors.Is(err, ErrUnknown) {
			return &httpError{http.StatusNotFound, err}
		}
		return noContent(w, err)
	})
	handle("PATCH /v1/bindings/{sandbox}", func(w http.ResponseWriter, r *http.Request) error {
		var req extendRequest
		d, err := decodeTTL(w, r, &req, &req.TTLSeconds)
		if err != nil {
			return err
		}
		return noContent(w, g.Extend(r.Context(), r.PathValue("sandbox"), d))
	})
	handle("DELETE /v1/bindings/{sandbox}", func(w http.ResponseWriter, r *http.Request) error {
		return noContent(w, g.UnregisterSandbox(r.Context(), r.PathValue("sandbox")))
	})
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeErr(w, &httpError{http.StatusUnauthorized, errors.New("the gateway's admin token is required")})
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// noContent answers 204 unless err.
func noContent(w http.ResponseWriter, err error) error {
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// writeErr answers err as {"error": msg} with its status (500 unless an httpError).
func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		code = he.code
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// Client registers sandboxes with a gateway's AdminHandler at URL.
type Client struct {
	URL   string
	Token string
	// HTTP is the client; nil uses http.DefaultClient.
	HTTP *http.Client
}

var _ Registrar = (*Client)(nil)

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.URL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach the egress gateway: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		switch {
		case resp.StatusCode == http.StatusNotFound && e.Error == "":
			return fmt.Errorf("egress gateway: %s %s: %s: the gateway lacks the route; upgrade it (sandboxctl gateway)", method, path, resp.Status)
		case resp.StatusCode == http.StatusNotFound:
			return fmt.Errorf("egress gateway: %s: %s: %w", resp.Status, e.Error, ErrUnknown)
		}
		return fmt.Errorf("egress gateway: %s: %s", resp.Status, e.Error)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// Register implements Registrar.
func (c *Client) Register(ctx context.Context, id string, list []engine.Secret, ttl time.Duration) (Registration, error) {
	req := registerRequest{TTLSeconds: seconds(ttl)}
	for _, s := range list {
		req.Secrets = append(req.Secrets, wireSecret{Name: s.Name, Value: s.Value, Hosts: s.Hosts})
	}
	var reg Registration
	err := c.do(ctx, http.MethodPut, "/v1/sandboxes/"+url.PathEscape(id), req, &reg)
	return reg, err
}

// Unregister implements Registrar.
func (c *Client) Unregister(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}

// Bind implements Registrar.
func (c *Client) Bind(ctx context.Context, id, sandbox string) error {
	return c.do(ctx, http.MethodPut, "/v1/bindings/"+url.PathEscape(sandbox), bindRequest{ID: id}, nil)
}

// UnregisterSandbox implements Registrar.
func (c *Client) UnregisterSandbox(ctx context.Context, sandbox string) error {
	return c.do(ctx, http.MethodDelete, "/v1/bindings/"+url.PathEscape(sandbox), nil, nil)
}

// Extend implements Registrar.
func (c *Client) Extend(ctx context.Context, sandbox string, ttl time.Duration) error {
	return c.do(ctx, http.MethodPatch, "/v1/bindings/"+url.PathEscape(sandbox), extendRequest{TTLSeconds: seconds(ttl)}, nil)
}
