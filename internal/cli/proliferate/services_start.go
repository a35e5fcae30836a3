package proliferate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

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
var stopSignals = apitype.StopSignals

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
		Use:         "start --name N --command C [--cwd D] [flags]",
		Annotations: required("name", "command"),
		Short:       "Start a service (a running service of the same name is replaced)",
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
			if err := requireFlags(cmd); err != nil {
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
	body, err := c.Do(o.Ctx, http.MethodPost, sidecar.ServicesPath, o.Request)
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
