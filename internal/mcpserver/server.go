// Package mcpserver exposes the service manager as MCP tools over stdio, for the
// coding agent. cmd/sandbox-mcp wires it to a Backend: the running API server
// when one answers, else the service manager acting on the state dir directly.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// Backend is what the tools act on.
type Backend interface {
	List(ctx context.Context) ([]apitype.ServiceInfo, *int, error)
	Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error)
	Stop(ctx context.Context, name string) error
	// Expose routes the preview to port; note is shown to the agent when the
	// exposure is recorded but not (yet) live.
	Expose(ctx context.Context, port int) (note string, err error)
	// LogTail returns the last n lines of a service's log.
	LogTail(ctx context.Context, name string, n int) ([]string, error)
}

// Options configures the MCP server.
type Options struct {
	Backend Backend
	// PreviewURLFile is read by get_preview_url.
	PreviewURLFile string
	Logger         *slog.Logger
	Version        string
	// PollInterval is how often wait_for_port tries to connect; default 100 ms.
	PollInterval time.Duration
}

// New builds the MCP server with every tool registered.
func New(opts Options) (*mcp.Server, error) {
	if opts.Backend == nil {
		return nil, errors.New("mcpserver: Backend is required")
	}
	if opts.Logger == nil {
		return nil, errors.New("mcpserver: Logger is required")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	t := &tools{opts: opts, log: opts.Logger.With("component", "mcp")}
	s := mcp.NewServer(&mcp.Implementation{Name: "sandbox_mcp", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Run long-lived dev servers in this sandbox and show them to the user: " +
			"start_service, then wait_for_port, then expose_port; service_logs when something fails.",
		Logger: opts.Logger.With("component", "mcp_sdk"),
	})
	mcp.AddTool(s, &mcp.Tool{Name: "start_service", Description: "Start a long-running command (dev server, watcher, database) as a named background service. " +
		"Its output goes to a log file (read it with service_logs). A running service of the same name is stopped first. " +
		"Use this instead of running servers in the foreground; follow with wait_for_port and expose_port."}, t.startService)
	mcp.AddTool(s, &mcp.Tool{Name: "stop_service", Description: "Stop a service and every process it started (the whole process group, then SIGKILL after a grace period)."}, t.stopService)
	mcp.AddTool(s, &mcp.Tool{Name: "expose_port", Description: "Show the app listening on this port to the user in the preview pane. Call it after the server listens (see wait_for_port)."}, t.exposePort)
	mcp.AddTool(s, &mcp.Tool{Name: "list_services", Description: "List the services with their status (running, stopped, error), pid, command, log file and the exposed port."}, t.listServices)
	mcp.AddTool(s, &mcp.Tool{Name: "get_preview_url", Description: "Get the public URL of the preview pane, to give to the user."}, t.getPreviewURL)
	mcp.AddTool(s, &mcp.Tool{Name: "wait_for_port", Description: "Block until something accepts TCP connections on the port, or the timeout passes. " +
		"On failure it reports the service's last log lines, so pass the service name that should be listening."}, t.waitForPort)
	mcp.AddTool(s, &mcp.Tool{Name: "service_logs", Description: "Return the last lines of a service's log (stdout and stderr)."}, t.serviceLogs)
	return s, nil
}

type tools struct {
	opts Options
	log  *slog.Logger
}

// StartServiceInput is the input of start_service.
type StartServiceInput struct {
	Name          string            `json:"name" jsonschema:"service name: letters, digits, '.', '_' or '-', at most 64"`
	Command       string            `json:"command" jsonschema:"shell command, run as bash -c <command>"`
	Cwd           string            `json:"cwd,omitempty" jsonschema:"working directory (default: the workspace)"`
	Restart       string            `json:"restart,omitempty" jsonschema:"restart policy: no (default), on-failure or always"`
	Env           map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	ReadyPort     int               `json:"readyPort,omitempty" jsonschema:"the service counts as ready once one of its processes listens on this TCP port (a port held by anything else never counts)"`
	ReadyLogRegex string            `json:"readyLogRegex,omitempty" jsonschema:"the service counts as ready once a log line matches this regular expression"`
}

// NameInput names one service.
type NameInput struct {
	Name string `json:"name" jsonschema:"service name"`
}

// PortInput is the input of expose_port.
type PortInput struct {
	Port int `json:"port" jsonschema:"TCP port 1-65535 the app listens on"`
}

// Empty is the input of tools that take no arguments.
type Empty struct{}

// WaitInput is the input of wait_for_port.
type WaitInput struct {
	Port      int    `json:"port" jsonschema:"TCP port to wait for"`
	Service   string `json:"service,omitempty" jsonschema:"service expected to listen; its last log lines are reported on failure"`
	TimeoutMs int    `json:"timeoutMs,omitempty" jsonschema:"how long to wait, in milliseconds (default 30000, at most 300000)"`
}

// LogsInput is the input of service_logs.
type LogsInput struct {
	Name  string `json:"name" jsonschema:"service name"`
	Lines int    `json:"lines,omitempty" jsonschema:"how many lines from the end (default 50, at most 1000)"`
}

func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func asJSON(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func (t *tools) startService(ctx context.Context, _ *mcp.CallToolRequest, in StartServiceInput) (*mcp.CallToolResult, any, error) {
	req := apitype.StartServiceRequest{Name: in.Name, Command: in.Command, Cwd: in.Cwd, Restart: in.Restart, Env: in.Env}
	switch {
	case in.ReadyPort != 0 && in.ReadyLogRegex != "":
		return nil, nil, errors.New("give readyPort or readyLogRegex, not both")
	case in.ReadyPort != 0:
		p := in.ReadyPort
		req.Readiness = &apitype.Readiness{TCP: &p}
	case in.ReadyLogRegex != "":
		req.Readiness = &apitype.Readiness{Log: in.ReadyLogRegex}
	}
	// The sidecar's validation, run here too so an old sidecar behind Remote
	// never sees what the contract refuses.
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	info, err := t.opts.Backend.Start(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return text("Started service %q (pid %d). Logs: %s\n%s", info.Name, info.PID, info.LogFile, asJSON(info)), nil, nil
}

func (t *tools) stopService(ctx context.Context, _ *mcp.CallToolRequest, in NameInput) (*mcp.CallToolResult, any, error) {
	if err := t.opts.Backend.Stop(ctx, in.Name); err != nil {
		return nil, nil, err
	}
	return text("Stopped service %q.", in.Name), nil, nil
}

func (t *tools) exposePort(ctx context.Context, _ *mcp.CallToolRequest, in PortInput) (*mcp.CallToolResult, any, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, nil, errors.New("port must be an integer between 1 and 65535")
	}
	note, err := t.opts.Backend.Expose(ctx, in.Port)
	if err != nil {
		return nil, nil, err
	}
	msg := fmt.Sprintf("Port %d is exposed in the preview.", in.Port)
	if note != "" {
		msg += " " + note
	}
	return text("%s", msg), nil, nil
}

func (t *tools) listServices(ctx context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
	svcs, exposed, err := t.opts.Backend.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	if svcs == nil {
		svcs = []apitype.ServiceInfo{}
	}
	return text("%s", asJSON(apitype.ServicesResponse{Services: svcs, ExposedPort: exposed})), nil, nil
}

func (t *tools) getPreviewURL(ctx context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
	b, err := os.ReadFile(t.opts.PreviewURLFile)
	if err != nil || strings.TrimSpace(string(b)) == "" {
		return text("The preview URL is not available yet."), nil, nil
	}
	return text("%s", strings.TrimSpace(string(b))), nil, nil
}

func (t *tools) waitForPort(ctx context.Context, _ *mcp.CallToolRequest, in WaitInput) (*mcp.CallToolResult, any, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, nil, errors.New("port must be an integer between 1 and 65535")
	}
	timeout := 30 * time.Second
	if in.TimeoutMs > 0 {
		timeout = min(time.Duration(in.TimeoutMs)*time.Millisecond, 5*time.Minute)
	}
	start := time.Now()
	if err := waitPort(ctx, in.Port, timeout, t.opts.PollInterval); err != nil {
		msg := fmt.Sprintf("port %d did not accept connections within %s: %v", in.Port, timeout, err)
		if in.Service != "" {
			msg += t.serviceContext(ctx, in.Service)
		}
		return nil, nil, errors.New(msg)
	}
	return text("Port %d accepts connections (after %d ms).", in.Port, time.Since(start).Milliseconds()), nil, nil
}

// serviceContext describes a service's state and last log lines for a failure message.
func (t *tools) serviceContext(ctx context.Context, name string) string {
	var b strings.Builder
	if svcs, _, err := t.opts.Backend.List(ctx); err == nil {
		for _, s := range svcs {
			if s.Name == name {
				fmt.Fprintf(&b, "\nservice %q is %s", name, s.Status)
				if s.ExitCode != nil {
					fmt.Fprintf(&b, " (exit code %d)", *s.ExitCode)
				}
			}
		}
	}
	lines, err := t.opts.Backend.LogTail(ctx, name, 20)
	if err != nil {
		fmt.Fprintf(&b, "\n(no log: %v)", err)
		return b.String()
	}
	fmt.Fprintf(&b, "\nlast %d log lines of %q:\n%s", len(lines), name, strings.Join(lines, "\n"))
	return b.String()
}

// waitPort dials 127.0.0.1:port (and [::1]:port) until one accepts or timeout passes.
func waitPort(ctx context.Context, port int, timeout, every time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var d net.Dialer
	var last error
	for {
		for _, host := range []string{"127.0.0.1", "::1"} {
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			c, err := d.DialContext(dctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			dcancel()
			if err == nil {
				c.Close()
				return nil
			}
			if host == "127.0.0.1" {
				last = err
			}
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return last
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (t *tools) serviceLogs(ctx context.Context, _ *mcp.CallToolRequest, in LogsInput) (*mcp.CallToolResult, any, error) {
	n := in.Lines
	if n <= 0 {
		n = 50
	}
	n = min(n, 1000)
	lines, err := t.opts.Backend.LogTail(ctx, in.Name, n)
	if err != nil {
		return nil, nil, err
	}
	if len(lines) == 0 {
		return text("The log of %q is empty.", in.Name), nil, nil
	}
	return text("%s", strings.Join(lines, "\n")), nil, nil
}
