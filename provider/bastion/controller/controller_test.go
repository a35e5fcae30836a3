package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/gitctl"
	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/link"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun: the controller answers its health without a token, refuses the
// agent's ports without one, forwards with one through the relay, and its
// gate answers on the socket.
func TestRun(t *testing.T) {
	testutil.NeedCommand(t, "git", "the git gate runs it")
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if out, err := exec.Command("git", "init", "-q", "-b", "main", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "app %s %q", r.URL.Path, r.Header.Get("Authorization"))
	})}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(aln)
	defer app.Close()
	appPort := aln.Addr().(*net.TCPAddr).Port

	relaySock, gitSock := filepath.Join(dir, "relay.sock"), filepath.Join(dir, "git.sock")
	rln, err := link.Listen(relaySock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	relayDone, runDone := make(chan error, 1), make(chan error, 1)
	go func() { relayDone <- (&link.Relay{}).Serve(ctx, rln) }()
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	go func() {
		runDone <- Run(ctx, Config{Addr: addr, Token: "plat", AgentPorts: []int{appPort}, RelaySocket: relaySock, GitSocket: gitSock,
			Git: gitctl.Config{Workspace: ws, SessionID: "s1", Remote: gitctl.Remote{URL: "http://127.0.0.1:1/x.git"}}})
	}()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	do := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for range 100 {
		if code, _ := do(rules.BastionHealthPath, ""); code == 200 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	app1 := rules.BastionPortPrefix + strconv.Itoa(appPort) + "/x"
	tests := []struct {
		name, path, token string
		code              int
		body              string
	}{
		{"health without a token", rules.BastionHealthPath, "", 200, `{"status":"ok"}` + "\n"},
		{"agent port without a token", app1, "", 401, ""},
		{"agent port with a wrong token", app1, "nope", 401, ""},
		{"agent port with the token", app1, "plat", 200, `app /x ""`},
		{"port not opened", rules.BastionPortPrefix + "1/x", "plat", 403, ""},
	}
	for _, tt := range tests {
		code, body := do(tt.path, tt.token)
		if code != tt.code || (tt.body != "" && body != tt.body) {
			t.Errorf("%s: GET %s = %d %q, want %d %q", tt.name, tt.path, code, body, tt.code, tt.body)
		}
	}
	gc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", gitSock)
	}}}
	defer gc.CloseIdleConnections()
	for body, want := range map[string]int{`{"args":["status","--short"]}`: 200, `{"args":["push","origin","HEAD:refs/heads/main"]}`: 403} {
		resp, err := gc.Post("http://gate/v1/git", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("gate %s = %d, want %d", body, resp.StatusCode, want)
		}
	}
}
