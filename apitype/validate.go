package apitype

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// StopSignals are the values StartServiceRequest.StopSignal accepts.
var StopSignals = []string{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"}

// Validate reports the first reason the sidecar refuses r, checked the same
// way where a start request enters: the service manager, and the MCP server
// before it sends one. (The CLI checks its flags itself, naming them in its
// messages, and the bounds through Bounds.) A value outside its bound is a
// *rules.LimitError naming the field. What depends on the machine (the cwd
// exists, the service cap) is checked by the service manager alone.
func (r StartServiceRequest) Validate() error {
	if r.Name == "" || strings.TrimSpace(r.Command) == "" {
		return errors.New("name and command are required")
	}
	if err := rules.ValidateName(r.Name); err != nil {
		return err
	}
	if err := r.Bounds().Check(); err != nil {
		return err
	}
	if strings.IndexByte(r.Command, 0) >= 0 {
		return errors.New("command must not contain NUL bytes")
	}
	switch r.Restart {
	case "", RestartNo, RestartOnFailure, RestartAlways:
	default:
		return fmt.Errorf("restart must be %q, %q or %q", RestartNo, RestartOnFailure, RestartAlways)
	}
	if r.StopSignal != "" && !slices.Contains(StopSignals, r.StopSignal) {
		return fmt.Errorf("stopSignal must be one of %s", strings.Join(StopSignals, ", "))
	}
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("env key %q is not a valid environment variable name", k)
		}
	}
	if rd := r.Readiness; rd != nil {
		return rd.validate()
	}
	return nil
}

func (rd *Readiness) validate() error {
	n := 0
	if rd.TCP != nil {
		n++
		if *rd.TCP < 1 || *rd.TCP > 65535 {
			return errors.New("readiness.tcp must be a port from 1 to 65535")
		}
	}
	if rd.HTTP != "" {
		n++
		u, err := url.Parse(rd.HTTP)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("readiness.http must be an http:// or https:// URL")
		}
	}
	if rd.Log != "" {
		n++
		if _, err := regexp.Compile(rd.Log); err != nil {
			return fmt.Errorf("readiness.log is not a valid regular expression: %v", err)
		}
	}
	if n != 1 {
		return errors.New("readiness must have exactly one of tcp, http or log")
	}
	return nil
}

// Bounds is what the bounds of rules apply to in r.
func (r StartServiceRequest) Bounds() rules.Start {
	b := rules.Start{
		Command: r.Command, Cwd: r.Cwd, Env: r.Env,
		StopTimeoutMs: r.StopTimeoutMs, MaxRestarts: r.MaxRestarts,
	}
	if rd := r.Readiness; rd != nil {
		b.ReadyHTTP, b.ReadyLog, b.ReadyTimeoutMs = rd.HTTP, rd.Log, rd.TimeoutMs
	}
	return b
}
