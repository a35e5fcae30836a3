package services

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMonitorReportsStartFailures: a monitor that cannot start its service
// reports why on the status pipe, as its only message, and exits with the
// code of the step that failed; a failed exec is also written to the log.
func TestMonitorReportsStartFailures(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	good := monitorSpec{
		Name: "fail", Instance: statePrefix(dir) + "-fail", Bash: "/bin/bash", Cwd: dir,
		Command: "exit 0", Env: []string{"PATH=" + os.Getenv("PATH")},
		LogPath: filepath.Join(dir, "fail.log"), ExitFile: filepath.Join(dir, "fail.exit"),
	}
	tests := []struct {
		name     string
		edit     func(*monitorSpec)
		raw      string // sent instead of the spec when set
		wantMsg  string // prefix of the error message
		wantCode int
		wantLog  string // in the log, when set
	}{
		{name: "spec not JSON", raw: "not json\n", wantMsg: "decode monitor spec: ", wantCode: 2},
		{name: "log under a file", edit: func(s *monitorSpec) { s.LogPath = filepath.Join(notDir, "fail.log") },
			wantMsg: "open log: ", wantCode: 1},
		{name: "no bash", edit: func(s *monitorSpec) { s.Bash = filepath.Join(dir, "no-bash") },
			wantMsg: "start bash: ", wantCode: 1, wantLog: `sandbox-mcp: start "exit 0": `},
		{name: "cwd gone", edit: func(s *monitorSpec) { s.Cwd = filepath.Join(dir, "gone") },
			wantMsg: "start bash: ", wantCode: 1, wantLog: `sandbox-mcp: start "exit 0": `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := good
			spec.LogPath = filepath.Join(t.TempDir(), "fail.log")
			if tc.edit != nil {
				tc.edit(&spec)
			}
			in := tc.raw
			if in == "" {
				b, _ := json.Marshal(spec)
				in = string(b) + "\n"
			}
			msgs, code := runFailingMonitor(t, spec, in)
			if len(msgs) != 1 || msgs[0].Type != msgError || !strings.HasPrefix(msgs[0].Message, tc.wantMsg) {
				t.Errorf("monitor messages = %+v, want one error starting %q", msgs, tc.wantMsg)
			}
			if code != tc.wantCode {
				t.Errorf("monitor exit code = %d, want %d", code, tc.wantCode)
			}
			if tc.wantLog != "" {
				log, err := os.ReadFile(spec.LogPath)
				if err != nil || !strings.Contains(string(log), tc.wantLog) {
					t.Errorf("log = %q, %v; want it to contain %q", log, err, tc.wantLog)
				}
			}
		})
	}
}

// runFailingMonitor runs this test binary as a monitor fed stdin and returns
// every status message it wrote and its exit code.
func runFailingMonitor(t *testing.T, spec monitorSpec, stdin string) ([]monitorMsg, int) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := &exec.Cmd{Path: os.Args[0], Args: []string{monitorName, spec.Name}}
	cmd.Env = append(os.Environ(), internalEnv+"="+monitorMode, monitorEnv+"="+spec.Instance)
	cmd.Stdin, cmd.ExtraFiles = strings.NewReader(stdin), []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		t.Fatal(err)
	}
	pw.Close()
	var msgs []monitorMsg
	br := bufio.NewReader(pr)
	for {
		msg, err := readMonitorMsg(br)
		if err != nil {
			break // EOF: the monitor is gone
		}
		msgs = append(msgs, msg)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("monitor exit = %v, want a failure", err)
	}
	return msgs, ee.ExitCode()
}
