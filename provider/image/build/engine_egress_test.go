package build_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// countingListener accepts on addr and counts the connections it gets.
func countingListener(t *testing.T, addr string) (port string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nthe host\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, accepted
}

// buildEngine is the local engine on the shared test store, for build sandboxes.
func buildEngine(t *testing.T) (*store.Store, *local.Engine) {
	t.Helper()
	s, _ := imagetest.Base(t)
	e, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir(), Images: s})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return s, e
}

// reachScript tries each host:port directly and through the sandbox's proxy (a
// CONNECT, with bash's /dev/tcp: the slim base has no curl) and prints one line each.
const reachScript = `
direct() { if timeout 5 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; then echo "direct $1:$2 open"; else echo "direct $1:$2 closed"; fi; }
proxied() {
  p=${HTTP_PROXY#http://}; p=${p%/}
  if [ -z "$HTTP_PROXY" ]; then echo "proxied $1:$2 no-proxy"; return; fi
  exec 3<>/dev/tcp/${p%:*}/${p##*:} || { echo "proxied $1:$2 proxy-unreachable"; return; }
  printf 'CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\n\r\n' $1 $2 $1 $2 >&3
  read -t 10 status <&3; echo "proxied $1:$2 $status" | tr -d '\r'; exec 3>&-
}
`

// Issue 31, finding 2: image-build RUN steps ran on the host's network and reached
// its loopback listeners and its own address. A step now runs in a sandbox network
// namespace whose only way out is the egress proxy, which refuses both.
func TestBuildStepReachesNothingOfTheHost(t *testing.T) {
	s, e := buildEngine(t)
	loPort, loHits := countingListener(t, "127.0.0.1:0")
	targets := []string{"127.0.0.1 " + loPort}
	var ownHits *atomic.Int32
	nets, err := egress.LocalNets()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		if a := n.Addr(); a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			// A listener of this test on the host's own address: nothing leaves the
			// machine, whatever the step does.
			var port string
			port, ownHits = countingListener(t, netip.AddrPortFrom(a, 0).String())
			targets = append(targets, a.String()+" "+port)
			break
		}
	}
	var script strings.Builder
	script.WriteString(reachScript)
	for _, tg := range targets {
		fmt.Fprintf(&script, "direct %s >> /opt/reach\nproxied %s >> /opt/reach\n", tg, tg)
	}
	fmt.Fprintf(&script, "echo %s >> /opt/reach\n", strconv.FormatInt(time.Now().UnixNano(), 36)) // a step of its own, not cached
	var progress strings.Builder
	// A step is one line of sh: the script (bash, for /dev/tcp) goes in as base64.
	step := image.Run("echo "+base64.StdEncoding.EncodeToString([]byte(script.String()))+" | base64 -d > /opt/reach.sh", "bash /opt/reach.sh")
	res, err := build.Build(t.Context(), image.Image{From: imagetest.BaseRef, Steps: []image.Step{step}},
		build.Options{Store: s, Runner: build.EngineRunner{Engine: e, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}, Progress: &progress})
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() { s.Remove(context.Background(), res.ID) })
	fs, err := s.ResolveImage(t.Context(), res.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join(fs.Layers[len(fs.Layers)-1], "opt/reach"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the step saw:\n%s", out)
	if n := loHits.Load(); n != 0 {
		t.Errorf("a build step reached the host's loopback listener %d times", n)
	}
	if ownHits != nil && ownHits.Load() != 0 {
		t.Errorf("a build step reached a listener on the host's own address %d times", ownHits.Load())
	}
	for _, tg := range targets {
		hp := strings.Replace(tg, " ", ":", 1)
		if !strings.Contains(string(out), "proxied "+hp+" HTTP/1.1 403") {
			t.Errorf("the step's CONNECT to %s through the egress proxy was not refused with 403:\n%s", hp, out)
		}
		if !strings.Contains(string(out), "direct "+hp+" closed") {
			t.Errorf("the step's direct connection to %s was not closed:\n%s", hp, out)
		}
	}
}

// The package mirrors stay reachable: apt-get installs a package through the egress
// proxy, in a build sandbox that reaches nothing else.
func TestBuildStepAptInstallThroughProxy(t *testing.T) {
	imagetest.RequireMirror(t, "apt-get install hello in a build step")
	s, e := buildEngine(t)
	uniq := strconv.FormatInt(time.Now().UnixNano(), 36)
	var progress strings.Builder
	res, err := build.Build(t.Context(), image.Image{From: imagetest.BaseRef, Steps: []image.Step{
		image.Run("echo "+uniq+" > /opt/uniq", "env | grep -i '^http_proxy=' > /opt/proxy",
			"apt-get update -qq", "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends hello",
			"rm -rf /var/lib/apt/lists/*"),
	}}, build.Options{Store: s, Runner: build.EngineRunner{Engine: e, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}, Progress: &progress})
	if err != nil {
		t.Fatalf("Build with apt-get install through the proxy: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() { s.Remove(context.Background(), res.ID) })
	fs, err := s.ResolveImage(t.Context(), res.ID)
	if err != nil {
		t.Fatal(err)
	}
	top := fs.Layers[len(fs.Layers)-1]
	if _, err := os.Stat(filepath.Join(top, "usr/bin/hello")); err != nil {
		t.Errorf("apt-get install hello left no usr/bin/hello in the step's layer: %v\n%s", err, progress.String())
	}
	if b, err := os.ReadFile(filepath.Join(top, "opt/proxy")); err != nil || !strings.Contains(string(b), "127.0.0.1") {
		t.Errorf("the step's http_proxy = %q, %v; want the sandbox's egress proxy", b, err)
	}
}
