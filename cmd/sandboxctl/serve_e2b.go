package main

// `sandboxctl serve --protocol e2b`: E2B's control plane and envd over the local
// engine (provider/e2b/e2bserver), and `--provider e2b`: sandboxctl driving E2B (or
// that server) through provider/e2b.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bserver"
)

// serveE2B serves until ctx ends. The API key is E2B_API_KEY, else a fresh one; the
// environment the SDKs and `--provider e2b` need is printed on stdout. With --image,
// the template base boots that image of the data dir's store.
func serveE2B(ctx context.Context, o serveOptions) error {
	templates, err := e2bTemplates(ctx, o)
	if err != nil {
		return err
	}
	key := strings.TrimSpace(o.Getenv(e2b.EnvAPIKey))
	if key == "" {
		b := make([]byte, 20)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		key = "e2b_" + hex.EncodeToString(b)
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	// The sandbox domain carries the server's port, so the SDKs' getHost(port),
	// <port>-<id>.localhost:PORT, is a URL curl and browsers reach as it is (they
	// resolve *.localhost to loopback); the server routes it by Host.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	domain := "localhost:" + port
	// Egress, as E2B sandboxes reach the internet; their ports stay their own.
	srv, err := e2bserver.New(e2bserver.Options{Engine: o.Engine, APIKey: key, Logger: o.Logger, Egress: true, Domain: domain,
		Templates: templates})
	if err != nil {
		ln.Close()
		return err
	}
	defer srv.Close()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(o.Stdout, "export %s=%s\nexport %s=%s\nexport %s=%s\nexport %s=%s\nexport %s=1\nexport %s=base\n",
		e2b.EnvAPIURL, url, e2b.EnvSandboxURL, url, e2b.EnvDomain, domain, e2b.EnvAPIKey, key, e2b.EnvLocalTunnels, e2b.EnvTemplate)
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	return srv.Serve(ctx, ln)
}

// e2bTemplates maps base to the store's image o.Image (resolved to its id now, so a
// missing image fails the serve, not the first create); nil without --image.
func e2bTemplates(ctx context.Context, o serveOptions) (map[string]string, error) {
	if o.Image == "" {
		return nil, nil
	}
	if o.Images == nil || !o.Engine.Capabilities().Images {
		return nil, fmt.Errorf("--image %s: this engine boots no images", o.Image)
	}
	in, err := o.Images.Get(ctx, o.Image)
	if err != nil {
		return nil, fmt.Errorf("--image: %w", imageError(o.Image, err))
	}
	o.Logger.Info("template base boots an image", "image", in.ID, "ref", o.Image)
	return map[string]string{"base": in.ID}, nil
}

// newE2BBackend drives E2B through E2B_API_KEY, E2B_DOMAIN, E2B_API_URL,
// E2B_SANDBOX_URL, E2B_TEMPLATE and E2B_LOCAL_TUNNELS.
func newE2BBackend(ctx context.Context, o backendOptions) (*backend, error) {
	co := e2b.ClientOptionsFromEnv(o.Getenv)
	if co.APIKey == "" {
		return nil, errors.New("E2B_API_KEY is required for --provider e2b (sandboxctl serve --protocol e2b prints it)")
	}
	c, err := e2b.NewClient(co)
	if err != nil {
		return nil, err
	}
	eo := e2b.EngineOptionsFromEnv(o.Getenv)
	eo.Timeout = provider.SandboxTimeout(o.Getenv)
	if eo.Gateway, err = gatewayFromEnv(o.Getenv); err != nil {
		return nil, err
	}
	eng, err := e2b.NewEngine(c, eo)
	if err != nil {
		return nil, err
	}
	return newBackend(eng, o, provider.Options{Kind: provider.KindE2B})
}
