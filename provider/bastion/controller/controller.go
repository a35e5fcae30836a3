// Package controller is what the bastion's controller sandbox runs (model C,
// docs/bastion.md), `sandbox-mcp bastion`: the ingress (package ingress) on
// its one tunnelled port, reaching the agent through the relay of package
// link, and the git gate (package gitctl) on a unix socket of the shared
// volume. It runs no agent code; the platform's token and the git token are
// in its environment only.
//
// cmd/sandbox-mcp (internal/cli/sandboxmcp) imports it.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/gitctl"
	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/ingress"
	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/link"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Config configures Run.
type Config struct {
	// Addr is the ingress' listen address; required.
	Addr string
	// Token is the platform's token the ingress checks; required.
	Token string
	// AgentPorts are the agent's ports the ingress opens; required.
	AgentPorts []int
	// UpstreamTokens are the tokens of the agent's own services by port
	// (ingress.Config.UpstreamTokens): the agent's sidecar's.
	UpstreamTokens map[int]string
	// RelaySocket is the agent's relay on the shared volume; required.
	RelaySocket string
	// GitSocket is where the git gate listens, on the shared volume; empty
	// runs no gate (a session without a repository).
	GitSocket string
	// Git configures the gate; used only with GitSocket.
	Git gitctl.Config
	// Logger receives the components' lines; default discards.
	Logger *slog.Logger
}

// Run serves the ingress and the git gate until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Addr == "" || cfg.RelaySocket == "" {
		return errors.New("bastion controller: Addr and RelaySocket are required")
	}
	relay := cfg.RelaySocket
	in, err := ingress.New(ingress.Config{Token: cfg.Token, Ports: cfg.AgentPorts, Logger: log, UpstreamTokens: cfg.UpstreamTokens,
		Dial: func(ctx context.Context, port int) (net.Conn, error) { return link.Dial(ctx, relay, port) }})
	if err != nil {
		return fmt.Errorf("bastion controller: %w", err)
	}
	var gate *gitctl.Gate
	if cfg.GitSocket != "" {
		cfg.Git.Logger = log
		if gate, err = gitctl.New(cfg.Git); err != nil {
			return fmt.Errorf("bastion controller: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+rules.BastionHealthPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.Handle("/", in)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("bastion controller: listen on %s: %w", cfg.Addr, err)
	}
	var gln net.Listener
	if gate != nil {
		if gln, err = link.Listen(cfg.GitSocket); err != nil {
			ln.Close()
			return fmt.Errorf("bastion controller: %w", err)
		}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: rules.RequestHeaderTimeout}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	if gate != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := gate.Serve(ctx, gln); err != nil {
				errc <- fmt.Errorf("git gate: %w", err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("ingress: %w", err)
		}
	}()
	log.Info("bastion controller running", "addr", ln.Addr().String(), "git_gate", gate != nil)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	_ = srv.Close()
	if gln != nil {
		_ = gln.Close()
	}
	wg.Wait()
	if err != nil {
		return fmt.Errorf("bastion controller: %w", err)
	}
	return nil
}
