package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider/apitype"
	"github.com/proliferate-ai/sandbox-mcp/provider/sidecar"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// NewCmdServices builds `proliferate services`.
func NewCmdServices(f *Factory) *cobra.Command {
	cmd := newGroup("services <command>", "Start, stop, expose and follow the sandbox's services")
	cmd.AddCommand(
		NewCmdServicesList(f, nil),
		NewCmdServicesStart(f, nil),
		NewCmdServicesStop(f, nil),
		NewCmdServicesRestart(f, nil),
		NewCmdServicesWait(f, nil),
		NewCmdServicesExpose(f, nil),
		NewCmdServicesLogs(f, nil),
		NewCmdServicesEvents(f, nil),
	)
	return cmd
}

// ListOptions are the inputs of `services list`.
type ListOptions struct {
	Ctx     context.Context
	Factory *Factory
}

// NewCmdServicesList builds `services list`.
func NewCmdServicesList(f *Factory, runF func(*ListOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List services and the exposed port",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &ListOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			return listRun(o)
		},
	}
}

func listRun(o *ListOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodGet, "/api/services", nil)
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}

// StartOptions are the inputs of `services start`.
type StartOptions struct {
	Ctx         context.Context
	Factory     *Factory
	Request     apitype.StartServiceRequest
	Wait        bool
	WaitTimeout time.Duration
	// Settle is how long a service without a readiness probe must run for
	// --wait to report it ready.
	Settle time.Duration
	// StopOnTimeout stops the service when WaitTimeout runs out.
	StopOnTimeout bool
}

// stopSignals are the values --stop-signal accepts.
var stopSignals = []string{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"}

// NewCmdServicesStart builds `services start`.
func NewCmdServicesStart(f *Factory, runF func(*StartOptions) error) *cobra.Command {
	var (
		name, command, cwd, restart, readyHTTP, readyLog, stopSignal string
		maxRestarts, readyTCP                                        int
		readyTimeout, stopTimeout, waitTimeout, settle               time.Duration
		env                                                          []string
		wait, stopOnTimeout                                          bool
	)
	cmd := &cobra.Command{
		Use:   "start --name N --command C [--cwd D] [flags]",
		Short: "Start a service (a running service of the same name is replaced)",
		Long: `Start a service: the command runs as "bash -c <command>" in its own process
group, in --cwd (default: the workspace), with its output appended to its log.
A running service of the same name is stopped first.

--restart, --ready-*, --env and --stop-* set the sidecar's supervision options.
At most one --ready-* probe may be given. --wait blocks until the service is
ready: the probe passed, or, without a probe, the service has kept running for
--settle. If it exits first, the last 20 log lines go to stderr and the exit
code is 1. If --wait-timeout passes first, the same happens and the message
says the service was left running; --stop-on-timeout stops it instead.`,
		Example: `  proliferate services start --name web --command "npm run dev" --ready-tcp 3000 --wait
  proliferate services start --name api --command "./serve" --restart on-failure --env PORT=8080`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "name", "command"); err != nil {
				return err
			}
			if cwd != "" && !filepath.IsAbs(cwd) {
				// The sidecar runs elsewhere; a relative --cwd means relative to the caller.
				abs, err := filepath.Abs(cwd)
				if err != nil {
					return fmt.Errorf("resolve --cwd %q: %w", cwd, err)
				}
				cwd = abs
			}
			req := apitype.StartServiceRequest{Name: name, Command: command, Cwd: cwd}
			fl := cmd.Flags()
			if fl.Changed("restart") {
				switch restart {
				case apitype.RestartNo, apitype.RestartOnFailure, apitype.RestartAlways:
					req.Restart = restart
				default:
					return usageErrorf("--restart must be 'no', 'on-failure' or 'always'")
				}
			}
			if fl.Changed("max-restarts") {
				if maxRestarts < 0 {
					return usageErrorf("--max-restarts must be a non-negative integer")
				}
				req.MaxRestarts = &maxRestarts
			}
			probes := 0
			rd := &apitype.Readiness{}
			if fl.Changed("ready-tcp") {
				if readyTCP < 1 || readyTCP > 65535 {
					return usageErrorf("--ready-tcp must be a port number (1-65535)")
				}
				rd.TCP = &readyTCP
				probes++
			}
			if fl.Changed("ready-http") {
				if !strings.HasPrefix(readyHTTP, "http://") && !strings.HasPrefix(readyHTTP, "https://") {
					return usageErrorf("--ready-http must be an http:// or https:// URL")
				}
				rd.HTTP = readyHTTP
				probes++
			}
			if fl.Changed("ready-log") {
				if _, err := regexp.Compile(readyLog); err != nil || readyLog == "" {
					return usageErrorf("--ready-log must be a regular expression")
				}
				rd.Log = readyLog
				probes++
			}
			if probes > 1 {
				return usageErrorf("only one of --ready-tcp, --ready-http and --ready-log may be given")
			}
			if fl.Changed("ready-timeout") {
				if probes == 0 {
					return usageErrorf("--ready-timeout needs --ready-tcp, --ready-http or --ready-log")
				}
				if readyTimeout <= 0 {
					return usageErrorf("--ready-timeout must be a positive duration")
				}
				rd.TimeoutMs = int(max(readyTimeout.Milliseconds(), 1))
			}
			if probes == 1 {
				req.Readiness = rd
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageErrorf("--env must be KEY=VALUE, got %q", kv)
				}
				if req.Env == nil {
					req.Env = map[string]string{}
				}
				req.Env[k] = v
			}
			if fl.Changed("stop-signal") {
				s := strings.ToUpper(stopSignal)
				if !strings.HasPrefix(s, "SIG") {
					s = "SIG" + s
				}
				ok := false
				for _, v := range stopSignals {
					ok = ok || v == s
				}
				if !ok {
					return usageErrorf("--stop-signal must be one of %s", strings.Join(stopSignals, ", "))
				}
				req.StopSignal = s
			}
			if fl.Changed("stop-timeout") {
				if stopTimeout < 0 {
					return usageErrorf("--stop-timeout must not be negative")
				}
				ms := int(stopTimeout.Milliseconds())
				req.StopTimeoutMs = &ms
			}
			if err := checkStartLimits(req); err != nil {
				return err
			}
			if waitTimeout <= 0 {
				return usageErrorf("--wait-timeout must be a positive duration")
			}
			if err := checkWaitFlags(fl.Changed("settle"), fl.Changed("stop-on-timeout"), wait, probes > 0, settle); err != nil {
				return err
			}
			o := &StartOptions{Ctx: cmd.Context(), Factory: f, Request: req, Wait: wait, WaitTimeout: waitTimeout,
				Settle: settle, StopOnTimeout: stopOnTimeout}
			if runF != nil {
				return runF(o)
			}
			return startRun(o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&name, "name", "", "service name: letters, digits, '.', '_', '-' (required)")
	fl.StringVar(&command, "command", "", "shell command to run (required)")
	fl.StringVar(&cwd, "cwd", "", "working directory, relative to the current one (default: the workspace)")
	fl.StringVar(&restart, "restart", "no", "restart policy: no, on-failure or always")
	fl.IntVar(&maxRestarts, "max-restarts", 5, "consecutive restarts before the service stays in error")
	fl.IntVar(&readyTCP, "ready-tcp", 0, "ready when a process of the service listens on this local TCP port")
	fl.StringVar(&readyHTTP, "ready-http", "", "ready when this URL answers 2xx or 3xx from a process of the service")
	fl.StringVar(&readyLog, "ready-log", "", "ready when a log line matches this regular expression")
	fl.DurationVar(&readyTimeout, "ready-timeout", 0, "give up on readiness after this long (default: the sidecar's)")
	fl.StringArrayVar(&env, "env", nil, "extra environment variable KEY=VALUE (repeatable)")
	fl.StringVar(&stopSignal, "stop-signal", "SIGTERM", "signal that stops the service: SIGTERM, SIGINT, SIGHUP or SIGQUIT")
	fl.DurationVar(&stopTimeout, "stop-timeout", 5*time.Second, "grace period before SIGKILL")
	fl.BoolVar(&wait, "wait", false, "block until the service is ready")
	fl.DurationVar(&waitTimeout, "wait-timeout", 2*time.Minute, "how long --wait waits")
	fl.DurationVar(&settle, "settle", time.Second, "without a --ready-* probe, how long the service must keep running for --wait")
	fl.BoolVar(&stopOnTimeout, "stop-on-timeout", false, "stop the service when --wait-timeout runs out (default: leave it running)")
	return cmd
}

func startRun(o *StartOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodPost, "/api/services", o.Request)
	if err != nil {
		return err
	}
	if !o.Wait {
		return printJSON(o.Factory.IO.Out, body)
	}
	w := &waiter{f: o.Factory, c: c, name: o.Request.Name, timeout: o.WaitTimeout, stopOnTimeout: o.StopOnTimeout, stopFlag: true}
	if o.Request.Readiness == nil && o.Settle > 0 {
		var started apitype.ServiceResponse
		_ = json.Unmarshal(body, &started)
		return w.settled(o.Ctx, started.Service, o.Settle)
	}
	return w.ready(o.Ctx)
}

// NameOptions are the inputs of the commands that take only --name.
type NameOptions struct {
	Ctx     context.Context
	Factory *Factory
	Name    string
}

// NewCmdServicesStop builds `services stop`.
func NewCmdServicesStop(f *Factory, runF func(*NameOptions) error) *cobra.Command {
	return nameCommand(f, "stop --name N", "Stop a service and its whole process group", runF, stopRun)
}

// NewCmdServicesRestart builds `services restart`.
func NewCmdServicesRestart(f *Factory, runF func(*NameOptions) error) *cobra.Command {
	return nameCommand(f, "restart --name N", "Restart a service with the same command, cwd and options", runF, restartRun)
}

func nameCommand(f *Factory, use, short string, runF, def func(*NameOptions) error) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "name"); err != nil {
				return err
			}
			o := &NameOptions{Ctx: cmd.Context(), Factory: f, Name: name}
			if runF != nil {
				return runF(o)
			}
			return def(o)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "service name (required)")
	return cmd
}

func stopRun(o *NameOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodDelete, sidecar.ServicePath(o.Name), nil)
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}

// unsupported reports whether err says the sidecar lacks an endpoint (an old
// sidecar answers an unknown route with a non-JSON 404, or 405/501), as
// opposed to a JSON 404 about the service itself.
func unsupported(err error) bool {
	var ae *sidecar.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusNotFound:
		return !ae.JSON()
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

func notFound(name string) error { return errors.New(rules.ServiceNotFound(name)) }

func restartRun(o *NameOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodPost, sidecar.ServicePath(o.Name)+"/restart", nil)
	if err == nil {
		return printJSON(o.Factory.IO.Out, body)
	}
	if !unsupported(err) {
		return err
	}
	// An old sidecar: look the service up, stop it, start it again.
	svc, _, err := lookupService(o.Ctx, c, o.Name)
	if err != nil {
		return err
	}
	if _, err := c.Do(o.Ctx, http.MethodDelete, sidecar.ServicePath(o.Name), nil); err != nil {
		return err
	}
	body, err = c.Do(o.Ctx, http.MethodPost, "/api/services", apitype.StartServiceRequest{
		Name: svc.Name, Command: svc.Command, Cwd: svc.Cwd,
		Restart: svc.Restart, MaxRestarts: svc.MaxRestarts, Readiness: svc.Readiness,
		Env: svc.Env, StopSignal: svc.StopSignal, StopTimeoutMs: svc.StopTimeoutMs,
	})
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}

// lookupService finds one service with GET /api/services/{name}, or in the
// list when the sidecar is too old for that route; fromList is then true.
// Unknown is `Service "N" not found`.
func lookupService(ctx context.Context, c *sidecar.Client, name string) (svc apitype.ServiceInfo, fromList bool, err error) {
	svc, err = c.GetService(ctx, name)
	if err == nil {
		return svc, false, nil
	}
	var ae *sidecar.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.JSON() {
		return svc, false, notFound(name)
	}
	if !unsupported(err) {
		return svc, false, err
	}
	list, err := c.ListServices(ctx)
	if err != nil {
		return svc, true, err
	}
	for _, s := range list.Services {
		if s.Name == name {
			return s, true, nil
		}
	}
	return svc, true, notFound(name)
}

// WaitOptions are the inputs of `services wait`.
type WaitOptions struct {
	Ctx     context.Context
	Factory *Factory
	Name    string
	Timeout time.Duration
}

// NewCmdServicesWait builds `services wait`.
func NewCmdServicesWait(f *Factory, runF func(*WaitOptions) error) *cobra.Command {
	var (
		name    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait --name N [--timeout D]",
		Short: "Wait until a service is ready",
		Long: `Wait until a service is ready and print it. A service waiting to be restarted
is waited for; one that stopped or gave up fails the command: the last 20 log
lines go to stderr and the exit code is 1.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "name"); err != nil {
				return err
			}
			if timeout <= 0 {
				return usageErrorf("--timeout must be a positive duration")
			}
			o := &WaitOptions{Ctx: cmd.Context(), Factory: f, Name: name, Timeout: timeout}
			if runF != nil {
				return runF(o)
			}
			c, err := f.Sidecar()
			if err != nil {
				return err
			}
			return (&waiter{f: f, c: c, name: o.Name, timeout: o.Timeout}).ready(o.Ctx)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "service name (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

// ready polls the service until it is ready and prints {"service":…}. On
// failure it prints the last 20 log lines on stderr and returns the reason.
func (w *waiter) ready(ctx context.Context) error {
	deadline := w.f.Now().Add(w.timeout)
	t := time.NewTicker(w.f.ServicePoll)
	defer t.Stop()
	for {
		svc, fromList, err := lookupService(ctx, w.c, w.name)
		if err != nil {
			if ctx.Err() != nil {
				return &interruptedError{}
			}
			return err
		}
		ready := svc.Ready || (fromList && svc.Status == apitype.StatusRunning)
		switch {
		case ready && svc.Status == apitype.StatusRunning:
			return printValue(w.f.IO.Out, apitype.ServiceResponse{Service: svc})
		case svc.Status == apitype.StatusStopped,
			svc.Status == apitype.StatusError && svc.NextRestartAt == nil:
			return failWait(ctx, w.f, w.c, w.name, failReason(svc))
		}
		if !w.f.Now().Before(deadline) {
			return w.timedOut(ctx, fmt.Sprintf("not ready after %s", w.timeout))
		}
		select {
		case <-ctx.Done():
			return &interruptedError{}
		case <-t.C:
		}
	}
}

// failReason says why a service that will not become ready ended.
func failReason(s apitype.ServiceInfo) string {
	switch {
	case s.Reason != "":
		return s.Reason
	case s.ExitCode != nil:
		return "exited with code " + strconv.Itoa(*s.ExitCode)
	}
	return "is " + s.Status
}

func failWait(ctx context.Context, f *Factory, c *sidecar.Client, name, reason string) error {
	if lines, err := c.LogTail(ctx, name, 20); err == nil && len(lines) > 0 {
		fmt.Fprintf(f.IO.ErrOut, "Last %d log lines of %q:\n", len(lines), name)
		for _, l := range lines {
			fmt.Fprintln(f.IO.ErrOut, l)
		}
	}
	return fmt.Errorf("Service %q %s", name, reason)
}

// ExposeOptions are the inputs of `services expose`.
type ExposeOptions struct {
	Ctx     context.Context
	Factory *Factory
	Port    int
}

// NewCmdServicesExpose builds `services expose`.
func NewCmdServicesExpose(f *Factory, runF func(*ExposeOptions) error) *cobra.Command {
	var port string
	cmd := &cobra.Command{
		Use:   "expose --port P",
		Short: "Route the preview site to a local port",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "port"); err != nil {
				return err
			}
			p, err := strconv.Atoi(strings.TrimSpace(port))
			if err != nil || p <= 0 || p > 65535 {
				return usageErrorf("--port must be a positive number")
			}
			o := &ExposeOptions{Ctx: cmd.Context(), Factory: f, Port: p}
			if runF != nil {
				return runF(o)
			}
			return exposeRun(o)
		},
	}
	cmd.Flags().StringVar(&port, "port", "", "local port, 1-65535 (required)")
	return cmd
}

func exposeRun(o *ExposeOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodPost, "/api/expose", map[string]int{"port": o.Port})
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}

// LogsOptions are the inputs of `services logs`.
type LogsOptions struct {
	Ctx     context.Context
	Factory *Factory
	Name    string
	Follow  bool
	Raw     bool
	Tail    int
}

// NewCmdServicesLogs builds `services logs`.
func NewCmdServicesLogs(f *Factory, runF func(*LogsOptions) error) *cobra.Command {
	o := &LogsOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "logs --name N [--follow] [--raw] [--tail N]",
		Short: "Print a service's log",
		Long: `Print a service's log as the sidecar streams it: each SSE payload
({"type":"initial"|"append"|"error",…}) on its own line. Without --follow it
stops after the first payload (an empty log, which the sidecar announces with
no payload at all, prints {"type":"initial"} after 2 s); with --follow it runs
until the stream ends or Ctrl-C (exit 130).

--raw prints only the log text. --tail N prints the last N lines instead
({"lines":[…]}, or the bare lines with --raw).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "name"); err != nil {
				return err
			}
			if cmd.Flags().Changed("tail") && o.Tail <= 0 {
				return usageErrorf("--tail must be a positive integer")
			}
			if o.Tail > 0 && o.Follow {
				return usageErrorf("--tail and --follow cannot be used together")
			}
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return logsRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", "", "service name (required)")
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().BoolVar(&o.Raw, "raw", false, "print only the log text")
	cmd.Flags().IntVar(&o.Tail, "tail", 0, "print the last N lines and exit")
	return cmd
}

func logsRun(o *LogsOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	out := o.Factory.IO.Out
	if o.Tail > 0 {
		body, err := c.Do(o.Ctx, http.MethodGet, sidecar.LogsPath(o.Name)+"?tail="+strconv.Itoa(o.Tail), nil)
		if err != nil {
			return err
		}
		if !o.Raw {
			return printJSON(out, body)
		}
		var lines apitype.LogLinesResponse
		if err := json.Unmarshal(body, &lines); err != nil {
			return fmt.Errorf("decode log lines: %w", err)
		}
		for _, l := range lines.Lines {
			fmt.Fprintln(out, l)
		}
		return nil
	}
	stream, err := c.OpenStream(o.Ctx, sidecar.LogsPath(o.Name))
	if err != nil {
		if o.Ctx.Err() != nil {
			return &interruptedError{}
		}
		return err
	}
	defer stream.Close()
	// The sidecar sends no initial frame for an empty log; without --follow,
	// a quiet stream must not hang the caller, so it counts as an empty log.
	var idle atomic.Bool
	if !o.Follow {
		t := time.AfterFunc(o.Factory.LogsFirstFrameWait, func() {
			idle.Store(true)
			stream.Close()
		})
		defer t.Stop()
	}
	for {
		data, err := stream.Next()
		switch {
		case err == nil:
		case o.Ctx.Err() != nil:
			return &interruptedError{}
		case idle.Load():
			if o.Raw {
				return nil
			}
			// As the sidecar's frames always do, it carries a content string.
			return printJSON(out, []byte(`{"type":"initial","content":""}`))
		case errors.Is(err, io.EOF):
			return nil
		default:
			return fmt.Errorf("read log stream: %w", err)
		}
		var fr apitype.LogFrame
		_ = json.Unmarshal(data, &fr)
		if !o.Raw {
			if err := printJSON(out, data); err != nil {
				return err
			}
		} else if fr.Type == "error" {
			return errors.New(fr.Message)
		} else if _, err := io.WriteString(out, fr.Content); err != nil {
			return err
		}
		if !o.Follow {
			return nil
		}
	}
}

// NewCmdServicesEvents builds `services events`.
func NewCmdServicesEvents(f *Factory, runF func(*ListOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "events",
		Short: "Follow service state changes",
		Long: `Print each service state change as the sidecar streams it (GET /api/events),
one JSON object per line: started, ready, exited (with exitCode), restarting
(with nextRestartAt), stopped, exposed (with port). Runs until Ctrl-C (exit 130).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &ListOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			c, err := f.Sidecar()
			if err != nil {
				return err
			}
			err = c.Stream(o.Ctx, "/api/events", func(data []byte) error { return printJSON(f.IO.Out, data) })
			if err != nil && o.Ctx.Err() != nil {
				return &interruptedError{}
			}
			return err
		},
	}
}
