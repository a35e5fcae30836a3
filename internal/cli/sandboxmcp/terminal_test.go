package sandboxmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// TestServeAPIShutdownKillsTerminals checks the wiring: the API serves the
// terminal, and stopping the sidecar kills the shells it started.
func TestServeAPIShutdownKillsTerminals(t *testing.T) {
	// The shell reads no ~/.bashrc of the machine running the test: one that runs
	// commands at start-up (version managers) can swallow the typed-ahead line.
	t.Setenv("HOME", t.TempDir())
	cfg := config.Config{Addr: "127.0.0.1:0", Token: "tok", WorkspaceDir: t.TempDir(), StateDir: filepath.Join(t.TempDir(), "state")}
	var logs testutil.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- serveAPI(ctx, cfg, slog.New(slog.NewJSONHandler(&logs, nil))) }()
	t.Cleanup(func() {
		cancel()
		<-errc
	})

	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if time.Now().After(deadline) {
			t.Fatalf("server did not start; log:\n%s", logs.String())
		}
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
				addr = rec.Addr
			}
		}
		time.Sleep(10 * time.Millisecond)
	}

	dctx, dcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer dcancel()
	c, _, err := websocket.Dial(dctx, "ws://"+addr+"/api/terminal", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer tok"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(dctx, websocket.MessageText, []byte("sleep 1000 & echo __P$$:$!:__\r")); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`__P(\d+):(\d+):__`)
	var out strings.Builder
	for !re.MatchString(out.String()) {
		_, p, err := c.Read(dctx)
		if err != nil {
			t.Fatalf("read: %v; output %q", err, out.String())
		}
		out.Write(p)
	}
	var pids []int
	for _, s := range re.FindStringSubmatch(out.String())[1:] {
		pid, _ := strconv.Atoi(s)
		pids = append(pids, pid)
	}

	cancel()
	select {
	case err := <-errc:
		errc <- err
		if err != nil {
			t.Fatalf("serveAPI: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serveAPI did not return after cancel")
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d outlived the sidecar", pid)
		}
	}
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}
