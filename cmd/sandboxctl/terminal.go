package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TerminalOptions are the inputs of terminal.
type TerminalOptions struct {
	Ctx     context.Context
	Factory *Factory
	// Target is a sandbox id or a sidecar URL.
	Target string
	Token  string
}

// NewCmdTerminal builds `terminal`.
func NewCmdTerminal(f *Factory, runF func(*TerminalOptions) error) *cobra.Command {
	o := &TerminalOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "terminal ID|SESSION|URL",
		Short: "Attach an interactive terminal to a sandbox's sidecar (or any sandbox-mcp URL)",
		Example: "  sandboxctl terminal \"$ID\"\n" +
			"  sandboxctl terminal --token \"$TOKEN\" \"$PROLIFERATE_SANDBOX_MCP_URL\"",
		Long: "Open the sidecar's terminal WebSocket (/api/terminal, protocol v1): a bash on a PTY\n" +
			"in the workspace. With a terminal on stdin it runs in raw mode and follows window\n" +
			"resizes. A bastion session's id attaches to its agent sandbox, through the engine.\n" +
			"A URL (http://HOST:PORT) attaches to any sandbox-mcp; its token comes from\n" +
			"--token or $SANDBOX_MCP_AUTH_TOKEN.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx, o.Target = cmd.Context(), args[0]
			return runOr(o, runF, terminalRun)
		},
	}
	cmd.Flags().StringVar(&o.Token, "token", "", "sidecar auth token (default: the sandbox's, or $SANDBOX_MCP_AUTH_TOKEN)")
	return cmd
}

func terminalRun(o *TerminalOptions) error {
	f, url, token := o.Factory, o.Target, o.Token
	var hc *http.Client
	if !strings.Contains(url, "://") {
		b, err := f.open(o.Ctx, "")
		if err != nil {
			return err
		}
		defer b.close()
		if b.Provider == nil {
			return errorf("provider %s cannot tell a sandbox's sidecar URL; give the URL", f.provider)
		}
		// A bastion session's id is its agent's terminal, reached through the engine.
		u, tok, dhc, err := b.Provider.SidecarClient(o.Ctx, resolveSandbox(o.Ctx, b.Engine, url))
		if err != nil {
			return err
		}
		url, hc = u, dhc
		if token == "" {
			token = tok
		}
		if pc, ok := b.Engine.(engine.PortClienter); ok && hc == nil {
			hc = pc.PortClient() // the engine's tunnels may need its certificate (Modal's)
		}
	}
	if token == "" {
		token = f.getenv(rules.EnvAuthToken)
	}
	return f.terminal(o.Ctx, url, token, hc)
}

// terminalURL turns a sidecar base URL into its terminal WebSocket URL.
func terminalURL(base string) string {
	u := strings.TrimRight(base, "/")
	if !strings.HasSuffix(u, "/api/terminal") {
		u += "/api/terminal"
	}
	switch {
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	}
	return u
}

// terminal attaches to the sidecar at base with hc (nil: the default client).
func (a *Factory) terminal(ctx context.Context, base, token string, hc *http.Client) error {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	c, resp, err := websocket.Dial(ctx, terminalURL(base), &websocket.DialOptions{HTTPHeader: h, HTTPClient: hc})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return errorf("terminal: unauthorized (wrong or missing token)")
		}
		return fmt.Errorf("terminal: %w", err)
	}
	c.SetReadLimit(16 << 20)
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	stop := a.terminalSetup(ctx, func(ws engine.WindowSize) {
		b, _ := json.Marshal(map[string]any{"type": "resize", "cols": ws.Cols, "rows": ws.Rows})
		_ = c.Write(ctx, websocket.MessageText, b)
	})
	defer stop()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := a.stdin.Read(buf)
			if n > 0 {
				if c.Write(ctx, websocket.MessageText, buf[:n]) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		_, p, err := c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("terminal: %w", err)
		}
		if _, err := a.stdout.Write(p); err != nil {
			return err
		}
	}
}

// terminalSetup, when stdin is a terminal, puts it in raw mode and calls size with
// its size now and after every SIGWINCH; stop restores it.
func (a *Factory) terminalSetup(ctx context.Context, size func(engine.WindowSize)) (stop func()) {
	in, _ := a.stdin.(*os.File)
	if in == nil || !isTerminal(in) {
		return func() {}
	}
	restore, err := makeRaw(int(in.Fd()))
	if err != nil {
		restore = func() {}
	}
	send := func() {
		ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ)
		if err == nil && ws.Col > 0 {
			size(engine.WindowSize{Cols: ws.Col, Rows: ws.Row})
		}
	}
	send()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-winch:
				send()
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		close(done)
		restore()
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal in raw mode (as cfmakeraw) and returns the restore.
func makeRaw(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
