package services

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestServiceProcessContract checks what a started service sees and what its
// log begins with: bash -c in its own process group, cwd defaulting to the
// workspace, FORCE_COLOR=1, stdin from /dev/null, and the old sidecar's marker
// byte for byte with an ISO-8601 UTC time equal to startedAt.
func TestServiceProcessContract(t *testing.T) {
	ws := t.TempDir()
	m := newTestManager(t, Config{WorkspaceDir: ws})
	cmd := `echo "stdin=$(readlink /proc/$$/fd/0) pgid=$(cut -d' ' -f5 /proc/$$/stat) pid=$$ color=$FORCE_COLOR cwd=$PWD"; sleep 300`
	before := time.Now().UnixMilli()
	info := start(t, m, apitype.StartServiceRequest{Name: "io", Command: cmd})
	after := time.Now().UnixMilli()
	if info.StartedAt < before || info.StartedAt > after {
		t.Errorf("startedAt = %d, want epoch milliseconds in [%d, %d]", info.StartedAt, before, after)
	}
	if info.Cwd != ws {
		t.Errorf("cwd = %q, want the workspace %q", info.Cwd, ws)
	}
	var log []byte
	waitFor(t, "the service's output", 10*time.Second, func() bool {
		log, _ = os.ReadFile(filepath.Join(m.cfg.StateDir, "logs", "io.log"))
		return regexp.MustCompile(`\nstdin=.*\n`).Match(log)
	})
	want := regexp.MustCompile(`^\n=== Service "io" started at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) ===\nCommand: ` +
		regexp.QuoteMeta(cmd) + `\nWorking directory: ` + regexp.QuoteMeta(ws) + "\n\n" +
		regexp.QuoteMeta(fmt.Sprintf("stdin=/dev/null pgid=%d pid=%d color=1 cwd=%s\n", info.PID, info.PID, ws)) + `$`)
	sub := want.FindSubmatch(log)
	if sub == nil {
		t.Fatalf("log = %q, want it to match %s", log, want)
	}
	at, err := time.Parse("2006-01-02T15:04:05.000Z", string(sub[1]))
	if err != nil || at.UnixMilli() != info.StartedAt {
		t.Errorf("marker time %s (%v) = %d ms, want startedAt %d", sub[1], err, at.UnixMilli(), info.StartedAt)
	}
}

// TestLargeCommandAndEnvironment checks that what the kernel accepts for
// `bash -c` starts, whatever the size of the sidecar's environment, and that a
// command the kernel cannot pass is the caller's error, not a failure.
func TestLargeCommandAndEnvironment(t *testing.T) {
	// Three variables of 50 KiB: each fits the kernel's limit of one string
	// (128 KiB), together they do not.
	big := strings.Repeat("x", 50<<10)
	m := newTestManager(t, Config{Environ: append(os.Environ(), "BIG1="+big, "BIG2="+big, "BIG3="+big)})
	cmd := ": " + strings.Repeat("a", 60<<10) + "; echo big=$((${#BIG1}+${#BIG2}+${#BIG3})); sleep 300"
	start(t, m, apitype.StartServiceRequest{Name: "large", Command: cmd})
	waitFor(t, "the service's output", 10*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(m.cfg.StateDir, "logs", "large.log"))
		return strings.Contains(string(b), fmt.Sprintf("\nbig=%d\n", 3*len(big)))
	})

	long := strings.Repeat("a", rules.MaxCommandBytes+1)
	_, err := m.Start(t.Context(), apitype.StartServiceRequest{Name: "long", Command: long})
	want := fmt.Sprintf("command is %d bytes long; the limit is %d bytes (64 KiB)", len(long), rules.MaxCommandBytes)
	if !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Errorf("Start(%d-byte command) = %v, want ErrInvalid %q", len(long), err, want)
	}
}
