package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestLimits(t *testing.T) {
	env := func(keys, valueBytes int) map[string]string {
		m := map[string]string{}
		for i := range keys {
			m[fmt.Sprintf("K%03d", i)] = ""
		}
		if valueBytes > 0 {
			m["V"] = strings.Repeat("v", valueBytes)
		}
		return m
	}
	tests := []struct {
		name      string
		err       error
		wantField string // "" when the value is within bounds
		wantMsg   string
	}{
		{"command at the limit", CheckCommand(strings.Repeat("c", MaxCommandBytes)), "", ""},
		{"command over", CheckCommand(strings.Repeat("c", MaxCommandBytes+1)), "command", "command is 65537 bytes long; the limit is 65536 bytes (64 KiB)"},
		{"cwd at the limit", CheckCwd(strings.Repeat("d", MaxCwdBytes)), "", ""},
		{"cwd over", CheckCwd(strings.Repeat("d", MaxCwdBytes+1)), "cwd", "cwd is 4097 bytes long; the limit is 4096 bytes (4 KiB)"},
		{"env empty", CheckEnv(nil), "", ""},
		{"env 256 keys", CheckEnv(env(256, 0)), "", ""},
		{"env 257 keys", CheckEnv(env(257, 0)), "env", "env has 257 variables; the limit is 256"},
		{"env at 64 KiB", CheckEnv(env(0, MaxEnvBytes-1)), "", ""},
		{"env over 64 KiB", CheckEnv(env(0, MaxEnvBytes)), "env", "env holds 65537 bytes of keys and values; the limit is 65536 bytes (64 KiB)"},
		{"stopTimeoutMs 0", CheckStopTimeoutMs(0), "", ""},
		{"stopTimeoutMs max", CheckStopTimeoutMs(MaxStopTimeoutMs), "", ""},
		{"stopTimeoutMs negative", CheckStopTimeoutMs(-1), "stopTimeoutMs", "stopTimeoutMs must be from 0 to 300000 (5 minutes), got -1"},
		{"stopTimeoutMs huge", CheckStopTimeoutMs(9223372036854), "stopTimeoutMs", "stopTimeoutMs must be from 0 to 300000 (5 minutes), got 9223372036854"},
		{"timeoutMs default", CheckReadyTimeoutMs(0), "", ""},
		{"timeoutMs 1", CheckReadyTimeoutMs(1), "", ""},
		{"timeoutMs max", CheckReadyTimeoutMs(MaxReadyTimeoutMs), "", ""},
		{"timeoutMs over", CheckReadyTimeoutMs(MaxReadyTimeoutMs + 1), "readiness.timeoutMs", "readiness.timeoutMs must be from 1 to 3600000 (1 hour), got 3600001"},
		{"timeoutMs max int", CheckReadyTimeoutMs(1<<63 - 1), "readiness.timeoutMs", "readiness.timeoutMs must be from 1 to 3600000 (1 hour), got 9223372036854775807"},
		{"maxRestarts 0", CheckMaxRestarts(0), "", ""},
		{"maxRestarts 1000", CheckMaxRestarts(1000), "", ""},
		{"maxRestarts 1001", CheckMaxRestarts(1001), "maxRestarts", "maxRestarts must be from 0 to 1000, got 1001"},
		{"maxRestarts negative", CheckMaxRestarts(-5), "maxRestarts", "maxRestarts must be from 0 to 1000, got -5"},
		{"http at the limit", CheckReadyHTTP(strings.Repeat("h", MaxProbeBytes)), "", ""},
		{"http over", CheckReadyHTTP(strings.Repeat("h", MaxProbeBytes+1)), "readiness.http", "readiness.http is 4097 bytes long; the limit is 4096 bytes (4 KiB)"},
		{"log over", CheckReadyLog(strings.Repeat("l", MaxProbeBytes+1)), "readiness.log", "readiness.log is 4097 bytes long; the limit is 4096 bytes (4 KiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantField == "" {
				if tt.err != nil {
					t.Fatalf("error = %v, want nil", tt.err)
				}
				return
			}
			var le *LimitError
			if !errors.As(tt.err, &le) {
				t.Fatalf("error = %v, want a *LimitError", tt.err)
			}
			if le.Field != tt.wantField || le.Error() != tt.wantMsg {
				t.Errorf("error = {%q, %q}, want {%q, %q}", le.Field, le.Error(), tt.wantField, tt.wantMsg)
			}
		})
	}
}

func TestTooManyServices(t *testing.T) {
	tests := []struct {
		stopped []string
		want    string
	}{
		{nil, "cannot add another service: 256 are recorded and the limit is 256; stop one, then start the new command under its name (a start under an existing name replaces it)"},
		{[]string{"old"}, `cannot add another service: 256 are recorded and the limit is 256; start the new command under the name of a stopped service ("old") to replace it`},
		{[]string{"a", "b", "c", "d"}, `cannot add another service: 256 are recorded and the limit is 256; start the new command under the name of a stopped service ("a", "b", "c") to replace it`},
	}
	for _, tt := range tests {
		if got := TooManyServices(256, tt.stopped); got != tt.want {
			t.Errorf("TooManyServices(256, %q) = %q, want %q", tt.stopped, got, tt.want)
		}
	}
}

func TestStartBytesAndTotalTooLarge(t *testing.T) {
	s := Start{Command: "abc", Cwd: "/w", Env: map[string]string{"K": "vv"}, ReadyHTTP: "http://x", ReadyLog: "up"}
	if got, want := s.Bytes(), 3+2+3+8+2; got != want {
		t.Errorf("Bytes() = %d, want %d", got, want)
	}
	got := TotalTooLarge(100, MaxTotalBytes-50, []string{"old"})
	want := `cannot record this service: its command, cwd, env and probe (100 bytes) and those of the services recorded would hold 4194354 bytes together; the limit is 4194304 bytes (4 MiB); shorten the command or env, or start it under the name of a stopped service ("old") to replace it`
	if got != want {
		t.Errorf("TotalTooLarge = %q, want %q", got, want)
	}
}
