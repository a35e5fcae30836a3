package apitype

import (
	"errors"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestStartServiceRequestValidate(t *testing.T) {
	port := func(n int) *int { return &n }
	ok := StartServiceRequest{Name: "web", Command: "npm run dev"}
	with := func(f func(*StartServiceRequest)) StartServiceRequest {
		r := ok
		f(&r)
		return r
	}
	tests := []struct {
		name      string
		req       StartServiceRequest
		wantErr   string // substring; "" means valid
		wantField string // the field of a *rules.LimitError
	}{
		{"minimal", ok, "", ""},
		{"all options", with(func(r *StartServiceRequest) {
			r.Cwd, r.Restart, r.MaxRestarts, r.StopSignal, r.StopTimeoutMs = "app", RestartOnFailure, port(3), "SIGINT", port(1500)
			r.Env = map[string]string{"PORT": "3000"}
			r.Readiness = &Readiness{HTTP: "http://127.0.0.1:3000/health", TimeoutMs: 5000}
		}), "", ""},
		{"no name", with(func(r *StartServiceRequest) { r.Name = "" }), "name and command are required", ""},
		{"blank command", with(func(r *StartServiceRequest) { r.Command = " \t" }), "name and command are required", ""},
		{"bad name", with(func(r *StartServiceRequest) { r.Name = "../x" }), "may contain only", ""},
		{"long command", with(func(r *StartServiceRequest) { r.Command = strings.Repeat("x", rules.MaxCommandBytes+1) }), "command is", "command"},
		{"NUL", with(func(r *StartServiceRequest) { r.Command = "a\x00b" }), "NUL", ""},
		{"restart", with(func(r *StartServiceRequest) { r.Restart = "sometimes" }), "restart must be", ""},
		{"negative restarts", with(func(r *StartServiceRequest) { r.MaxRestarts = port(-1) }), "maxRestarts", "maxRestarts"},
		{"signal", with(func(r *StartServiceRequest) { r.StopSignal = "SIGKILL" }), "stopSignal must be one of SIGTERM, SIGINT, SIGHUP, SIGQUIT", ""},
		{"negative stop timeout", with(func(r *StartServiceRequest) { r.StopTimeoutMs = port(-1) }), "stopTimeoutMs", "stopTimeoutMs"},
		{"env key", with(func(r *StartServiceRequest) { r.Env = map[string]string{"A=B": "x"} }), "env key", ""},
		{"two probes", with(func(r *StartServiceRequest) { r.Readiness = &Readiness{TCP: port(3000), Log: "ready"} }), "exactly one", ""},
		{"no probe", with(func(r *StartServiceRequest) { r.Readiness = &Readiness{} }), "exactly one", ""},
		{"tcp range", with(func(r *StartServiceRequest) { r.Readiness = &Readiness{TCP: port(70000)} }), "readiness.tcp", ""},
		{"http scheme", with(func(r *StartServiceRequest) { r.Readiness = &Readiness{HTTP: "ftp://x"} }), "readiness.http", ""},
		{"log regexp", with(func(r *StartServiceRequest) { r.Readiness = &Readiness{Log: "("} }), "readiness.log", ""},
		{"probe timeout", with(func(r *StartServiceRequest) { r.Readiness = &Readiness{Log: "up", TimeoutMs: -1} }), "timeoutMs", "readiness.timeoutMs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			var le *rules.LimitError
			if got := errors.As(err, &le); got != (tt.wantField != "") || (got && le.Field != tt.wantField) {
				t.Errorf("Validate() = %#v, want a LimitError of field %q: %v", err, tt.wantField, got)
			}
		})
	}
}
