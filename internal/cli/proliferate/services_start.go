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
	"github.com/spf13/pflag"

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
	var sf startFlags
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
			o, err := sf.options(cmd.Flags())
			if err != nil {
				return err
			}
			o.Ctx, o.Factory = cmd.Context(), f
			if runF != nil {
				return runF(o)
			}
			return startRun(o)
		},
	}
	sf.register(cmd.Flags())
	return cmd
}

// startFlags holds the values of the `services start` flags. Most of them are
// only sent when given (fl.Changed), so the sidecar's defaults apply
// otherwise; the defaults registered here are what --help shows.
type startFlags struct {
	name, command, cwd, restart, readyHTTP, readyLog, stopSignal string
	maxRestarts, readyTCP                                        int
	readyTimeout, stopTimeout, waitTimeout, settle               time.Duration
	env                                                          []string
	wait, stopOnTimeout                                          bool
}

func (sf *startFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&sf.name, "name", "", "service name: letters, digits, '.', '_', '-' (required)")
	fl.StringVar(&sf.command, "command", "", "shell command to run (required)")
	fl.StringVar(&sf.cwd, "cwd", "", "working directory, relative to the current one (default: the workspace)")
	fl.StringVar(&sf.restart, "restart", "no", "restart policy: no, on-failure or always")
	fl.IntVar(&sf.maxRestarts, "max-restarts", 5, "consecutive restarts before the service stays in error")
	fl.IntVar(&sf.readyTCP, "ready-tcp", 0, "ready when a process of the service listens on this local TCP port")
	fl.StringVar(&sf.readyHTTP, "ready-http", "", "ready when this URL answers 2xx or 3xx from a process of the service")
	fl.StringVar(&sf.readyLog, "ready-log", "", "ready when a log line matches this regular expression")
	fl.DurationVar(&sf.readyTimeout, "ready-timeout", 0, "give up on readiness after this long (default: the sidecar's)")
	fl.StringArrayVar(&sf.env, "env", nil, "extra environment variable KEY=VALUE (repeatable)")
	fl.StringVar(&sf.stopSignal, "stop-signal", "SIGTERM", "signal that stops the service: SIGTERM, SIGINT, SIGHUP or SIGQUIT")
	fl.DurationVar(&sf.stopTimeout, "stop-timeout", 5*time.Second, "grace period before SIGKILL")
	fl.BoolVar(&sf.wait, "wait", false, "block until the service is ready")
	fl.DurationVar(&sf.waitTimeout, "wait-timeout", 2*time.Minute, "how long --wait waits")
	fl.DurationVar(&sf.settle, "settle", time.Second, "without a --ready-* probe, how long the service must keep running for --wait")
	fl.BoolVar(&sf.stopOnTimeout, "stop-on-timeout", false, "stop the service when --wait-timeout runs out (default: leave it running)")
}

// options checks the flags and builds the options, without Ctx and Factory.
// The checks run in flag order, so the first bad flag is the one reported.
func (sf *startFlags) options(fl *pflag.FlagSet) (*StartOptions, error) {
	req, err := sf.request(fl)
	if err != nil {
		return nil, err
	}
	if err := checkStartLimits(req); err != nil {
		return nil, err
	}
	if sf.waitTimeout <= 0 {
		return nil, usageErrorf("--wait-timeout must be a positive duration")
	}
	if err := checkWaitFlags(fl.Changed("settle"), fl.Changed("stop-on-timeout"), sf.wait, req.Readiness != nil, sf.settle); err != nil {
		return nil, err
	}
	return &StartOptions{Request: req, Wait: sf.wait, WaitTimeout: sf.waitTimeout,
		Settle: sf.settle, StopOnTimeout: sf.stopOnTimeout}, nil
}

// request builds the request the sidecar gets from the flags.
func (sf *startFlags) request(fl *pflag.FlagSet) (apitype.StartServiceRequest, error) {
	var req apitype.StartServiceRequest
	cwd := sf.cwd
	if cwd != "" && !filepath.IsAbs(cwd) {
		// The sidecar runs elsewhere; a relative --cwd means relative to the caller.
		abs, err := filepath.Abs(cwd)
		if err != nil {
			return req, fmt.Errorf("resolve --cwd %q: %w", cwd, err)
		}
		cwd = abs
	}
	req = apitype.StartServiceRequest{Name: sf.name, Command: sf.command, Cwd: cwd}
	if fl.Changed("restart") {
		switch sf.restart {
		case apitype.RestartNo, apitype.RestartOnFailure, apitype.RestartAlways:
			req.Restart = sf.restart
		default:
			return req, usageErrorf("--restart must be 'no', 'on-failure' or 'always'")
		}
	}
	if fl.Changed("max-restarts") {
		if sf.maxRestarts < 0 {
			return req, usageErrorf("--max-restarts must be a non-negative integer")
		}
		req.MaxRestarts = &sf.maxRestarts
	}
	rd, err := sf.readiness(fl)
	if err != nil {
		return req, err
	}
	req.Readiness = rd
	if req.Env, err = parseEnvFlags(sf.env); err != nil {
		return req, err
	}
	if fl.Changed("stop-signal") {
		if req.StopSignal, err = parseStopSignal(sf.stopSignal); err != nil {
			return req, err
		}
	}
	if fl.Changed("stop-timeout") {
		if sf.stopTimeout < 0 {
			return req, usageErrorf("--stop-timeout must not be negative")
		}
		ms := int(sf.stopTimeout.Milliseconds())
		req.StopTimeoutMs = &ms
	}
	return req, nil
}

// readiness is the probe of the --ready-* flags, or nil without one: the
// sidecar then calls the service ready as soon as it runs.
func (sf *startFlags) readiness(fl *pflag.FlagSet) (*apitype.Readiness, error) {
	probes := 0
	rd := &apitype.Readiness{}
	if fl.Changed("ready-tcp") {
		if sf.readyTCP < 1 || sf.readyTCP > 65535 {
			return nil, usageErrorf("--ready-tcp must be a port number (1-65535)")
		}
		rd.TCP = &sf.readyTCP
		probes++
	}
	if fl.Changed("ready-http") {
		if !strings.HasPrefix(sf.readyHTTP, "http://") && !strings.HasPrefix(sf.readyHTTP, "https://") {
			return nil, usageErrorf("--ready-http must be an http:// or https:// URL")
		}
		rd.HTTP = sf.readyHTTP
		probes++
	}
	if fl.Changed("ready-log") {
		if _, err := regexp.Compile(sf.readyLog); err != nil || sf.readyLog == "" {
			return nil, usageErrorf("--ready-log must be a regular expression")
		}
		rd.Log = sf.readyLog
		probes++
	}
	if probes > 1 {
		return nil, usageErrorf("only one of --ready-tcp, --ready-http and --ready-log may be given")
	}
	if fl.Changed("ready-timeout") {
		if probes == 0 {
			return nil, usageErrorf("--ready-timeout needs --ready-tcp, --ready-http or --ready-log")
		}
		if sf.readyTimeout <= 0 {
			return nil, usageErrorf("--ready-timeout must be a positive duration")
		}
		rd.TimeoutMs = int(max(sf.readyTimeout.Milliseconds(), 1))
	}
	if probes == 0 {
		return nil, nil
	}
	return rd, nil
}

// parseEnvFlags turns the --env values into a map, nil when there are none
// so the request leaves env out.
func parseEnvFlags(kvs []string) (map[string]string, error) {
	var env map[string]string
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--env must be KEY=VALUE, got %q", kv)
		}
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	return env, nil
}

// parseStopSignal accepts a stop signal in any case, with or without SIG,
// and returns the sidecar's spelling of it.
func parseStopSignal(s string) (string, error) {
	s = strings.ToUpper(s)
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	for _, v := range stopSignals {
		if v == s {
			return s, nil
		}
	}
	return "", usageErrorf("--stop-signal must be one of %s", strings.Join(stopSignals, ", "))
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
