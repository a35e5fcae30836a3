package sandboxmcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/logtail"
	"github.com/proliferate-ai/sandbox-mcp/internal/mcpserver"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"

	"github.com/proliferate-ai/sandbox-mcp/internal/version"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// runMCP serves the MCP tools on stdin/stdout until stdin closes or ctx ends.
// Nothing but JSON-RPC is written to stdout; logs go to stderr.
func runMCP(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "sandbox-mcp: mcp takes no arguments\n%s", usage)
		return 1
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp: %v\n", err)
		return 1
	}
	log := newLogger(stderr, cfg)
	backend, closeBackend, err := newMCPBackend(cfg, log)
	if err != nil {
		log.Error("mcp backend", "err", err)
		return 1
	}
	defer closeBackend()
	srv, err := mcpserver.New(mcpserver.Options{Backend: backend, PreviewURLFile: cfg.PreviewURLFile, Logger: log, Version: version.String()})
	if err != nil {
		log.Error("mcp server", "err", err)
		return 1
	}
	t := &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}
	if err := srv.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		log.Error("mcp session ended", "err", err)
		return 1
	}
	return 0
}

// newMCPBackend acts through the API server when one answers at cfg.SidecarURL
// with our token, and on the state dir directly when nothing listens there;
// the API server adopts directly started services when it comes up.
func newMCPBackend(cfg config.Config, log *slog.Logger) (mcpserver.Backend, func(), error) {
	probe, err := sidecar.New(sidecar.Options{BaseURL: cfg.SidecarURL, Token: cfg.Token, Retries: -1, Timeout: 2 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	remote, err := sidecar.New(sidecar.Options{BaseURL: cfg.SidecarURL, Token: cfg.Token, Retries: 3, RetryDelay: 300 * time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	var (
		mu  sync.Mutex
		mgr *services.Manager
	)
	auto := &mcpserver.Auto{
		Probe: func(ctx context.Context) error {
			err := probe.AuthCheck(ctx)
			var ae *sidecar.APIError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
				return fmt.Errorf("the sidecar API at %s rejected the auth token (set %s to its token)", cfg.SidecarURL, rules.EnvAuthToken)
			case errors.As(err, &ae):
				return nil // an older sidecar without the route still serves the rest
			case errors.Is(err, syscall.ECONNREFUSED):
				return mcpserver.ErrNoServer
			default:
				return fmt.Errorf("reach the sidecar API at %s: %w", cfg.SidecarURL, err)
			}
		},
		Remote: &mcpserver.Remote{Client: remote},
		Direct: func() (mcpserver.Backend, error) {
			m, err := services.New(services.Config{StateDir: cfg.StateDir, WorkspaceDir: cfg.WorkspaceDir, Logger: log})
			if err != nil {
				return nil, err
			}
			logs, err := logtail.New(logtail.Options{Dir: cfg.LogDir(), Logger: log})
			if err != nil {
				m.Close()
				return nil, err
			}
			mu.Lock()
			mgr = m
			mu.Unlock()
			return &mcpserver.Direct{Manager: m, Logs: logs, Exposed: statefile.ExposedPort{Dir: cfg.StateDir}}, nil
		},
	}
	closeFn := func() {
		mu.Lock()
		defer mu.Unlock()
		if mgr != nil {
			// Services keep running; this only ends supervision in this process.
			mgr.Close()
		}
	}
	return auto, closeFn, nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
