package gateway

// Registration over HTTP, for a gateway in another process: AdminHandler serves it on
// a listener of its own (never the sandboxes'), behind a bearer token; Client calls it.
//
//	PUT    /v1/sandboxes/{id}  {"secrets":[{"name","value","hosts"}]} → Registration
//	DELETE /v1/sandboxes/{id}

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

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// wireSecret carries a value, which engine.Secret never serializes.
type wireSecret struct {
	Name  string   `json:"name"`
	Value string   `json:"value"`
	Hosts []string `json:"hosts"`
}

type registerRequest struct {
	Secrets []wireSecret `json:"secrets"`
}

const maxAdminBody = 1 << 20

// AdminHandler serves registration for g to callers with token.
func AdminHandler(g Registrar, token string) (http.Handler, error) {
	if len(token) < 16 {
		return nil, errors.New("gateway admin: a token of at least 16 characters is required")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		var req registerRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody)).Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("decode the registration: %w", err))
			return
		}
		list := make([]engine.Secret, 0, len(req.Secrets))
		for _, s := range req.Secrets {
			list = append(list, engine.Secret{Name: s.Name, Value: s.Value, Hosts: s.Hosts})
		}
		reg, err := g.Register(r.Context(), r.PathValue("id"), list)
		if err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(reg)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := g.Unregister(r.Context(), r.PathValue("id")); err != nil {
			writeErr(w, http.StatusInternalServerError, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeErr(w, http.StatusUnauthorized, errors.New("the gateway's admin token is required"))
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

func writeErr(w http.ResponseWriter, code int, err error) {
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

func (c *Client) do(ctx context.Context, method, id string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.URL, "/")+"/v1/sandboxes/"+url.PathEscape(id), rd)
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
		return fmt.Errorf("egress gateway: %s: %s", resp.Status, e.Error)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// Register implements Registrar.
func (c *Client) Register(ctx context.Context, id string, list []engine.Secret) (Registration, error) {
	req := registerRequest{}
	for _, s := range list {
		req.Secrets = append(req.Secrets, wireSecret{Name: s.Name, Value: s.Value, Hosts: s.Hosts})
	}
	var reg Registration
	err := c.do(ctx, http.MethodPut, id, req, &reg)
	return reg, err
}

// Unregister implements Registrar.
func (c *Client) Unregister(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, id, nil, nil)
}
