package sandboxmcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/api"
	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/expose"
	"github.com/proliferate-ai/sandbox-mcp/internal/gitrepo"
	"github.com/proliferate-ai/sandbox-mcp/internal/logtail"
	"github.com/proliferate-ai/sandbox-mcp/internal/ports"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
	"github.com/proliferate-ai/sandbox-mcp/internal/terminal"

	"github.com/proliferate-ai/sandbox-mcp/rules"

	"github.com/proliferate-ai/sandbox-mcp/internal/version"
)

// usage is the short form printed with a usage error.
const usage = usageHead

// run is the whole program behind main, testable with fake streams and environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 1
	}
	switch args[0] {
	case "api":
		if isHelp(args[1:]) {
			writeHelp(stdout, apiHead)
			return 0
		}
		return runAPI(ctx, args[1:], getenv, stderr)
	case "mcp":
		if isHelp(args[1:]) {
			writeHelp(stdout, mcpHead)
			return 0
		}
		return runMCP(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "bastion", "relay": // a bastion session's halves (bastion.go)
		return runBastionCommand(ctx, args, getenv, stdout, stderr)
	case "version", "--version", "-version":
		writeVersion(stdout)
		return 0
	case "completion":
		return runCompletion(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		writeHelp(stdout, usageHead)
		return 0
	default:
		fmt.Fprintf(stderr, "sandbox-mcp: unknown command %q\n%s", args[0], usage)
		return 1
	}
}

func loadConfig(getenv func(string) string) (config.Config, error) {
	cwd, _ := os.Getwd()
	return config.Load(getenv, cwd)
}

func newLogger(w io.Writer, cfg config.Config) *slog.Logger {
	level := slog.LevelInfo
	if cfg.LogLevel == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}))
}

// durationsAsText logs a time.Duration as Go writes it ("1.5s"), not as
// nanoseconds, which nobody reads right.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

func runAPI(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := loadConfig(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp: %v\n", err)
		return 1
	}
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address (env SANDBOX_MCP_ADDR)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	log := newLogger(stderr, cfg)
	// Services run at nice +10 with a raised OOM score (set by their monitor);
	// the sidecar that answers health and stops them protects itself where permitted.
	if err := services.ProtectSidecar(); err != nil {
		log.Info("oom_score_adj of the sidecar left as is (lowering it is not permitted here)", "err", err)
	}
	if cfg.GOGC == "" {
		// Half the default heap growth: after a burst of requests the sidecar
		// keeps ~2 MiB less resident (12.2 vs 14.4 MiB after 4 s of wrk over 16
		// connections) with no measurable loss of throughput. GOGC still wins.
		debug.SetGCPercent(50)
	}
	var announce func(net.Addr)
	if cfg.Token == "" {
		// Secure by default: callers that know no token get 401; a person running
		// it locally copies the export line, printed once the URL is known.
		cfg.Token = randomToken()
		announce = func(a net.Addr) {
			fmt.Fprintf(stderr, "sandbox-mcp: no %s or %s set; generated a token for this run. To use the API and the CLI from a shell:\nexport %s=%s %s=%s\n",
				rules.EnvAuthToken, rules.EnvAuthTokenFallback, rules.EnvAuthToken, cfg.Token, rules.EnvSidecarURL, config.URLForAddr(a.String()))
		}
	}
	if err := serveAPIAnnounce(ctx, cfg, log, announce); err != nil {
		log.Error("api stopped", "err", err)
		return 1
	}
	return 0
}

// serveAPI wires the components, listens on cfg.Addr and serves until ctx ends.
func serveAPI(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return serveAPIAnnounce(ctx, cfg, log, nil)
}

// serveAPIAnnounce is serveAPI that calls announce, when set, with the
// listener's address once it listens.
func serveAPIAnnounce(ctx context.Context, cfg config.Config, log *slog.Logger, announce func(net.Addr)) error {
	opts := api.Options{Token: cfg.Token, Logger: log, Version: version.String()}
	// Services keep running when the sidecar stops; Close only ends supervision.
	mgr, err := services.New(services.Config{StateDir: cfg.StateDir, WorkspaceDir: cfg.WorkspaceDir, Logger: log})
	if err != nil {
		return err
	}
	defer mgr.Close()
	opts.Services, opts.Events = mgr, mgr
	if g, err := gitrepo.New(gitrepo.Options{Dir: cfg.WorkspaceDir, Logger: log}); err != nil {
		log.Warn("git endpoints disabled", "err", err)
	} else {
		opts.Git = g
	}
	if p, err := ports.New(ports.Options{Logger: log, SidecarPorts: addrPorts(cfg.Addr)}); err != nil {
		log.Warn("ports endpoint disabled", "err", err)
	} else {
		opts.Ports = p
	}
	// Without port exposure the rest of the API still serves; /api/expose answers 501.
	if exp, err := expose.New(ctx, expose.Options{PreviewAddr: cfg.PreviewAddr, CaddySnippet: cfg.CaddySnippet,
		Caddyfile: cfg.Caddyfile, CaddyAdmin: cfg.CaddyAdmin, Store: statefile.ExposedPort{Dir: cfg.StateDir},
		OnExposed: func(port int) { mgr.Publish(apitype.Event{Type: apitype.EventExposed, Port: &port}) },
		Logger:    log}); err != nil {
		log.Error("port exposure disabled", "err", err)
	} else {
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = exp.Close(sctx)
		}()
		opts.Expose = exp
	}
	term, err := terminal.New(terminal.Options{Dir: cfg.WorkspaceDir, MaxSessions: cfg.MaxTerminals, Logger: log})
	if err != nil {
		return err
	}
	// Every shell dies with the sidecar: none may outlive it unsupervised.
	defer term.Close()
	opts.Terminal = term
	logs, err := logtail.New(logtail.Options{Dir: cfg.LogDir(), Logger: log})
	if err != nil {
		return err
	}
	opts.Logs = logs
	srv, err := api.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		// net's error already reads "listen tcp <addr>: <cause>"; wrapping it
		// again would say the address twice.
		return err
	}
	// The API bounds request reading and open connections (see api.HTTPServer).
	hs, ln := srv.HTTPServer(ln, slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	hs.RegisterOnShutdown(func() { _ = term.Close() })
	log.Info("listening", "addr", ln.Addr().String(), "version", opts.Version, "workspace", cfg.WorkspaceDir, "state_dir", cfg.StateDir)
	if announce != nil {
		announce(ln.Addr())
	}

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// addrPorts returns the port of a listen address, for marking the sidecar's
// own ports; none when it has no fixed port.
func addrPorts(addr string) []int {
	_, p, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(p); err == nil && perr == nil && n > 0 {
		return []int{n}
	}
	return nil
}
