package modal

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestDialPortRelay: a port given no tunnel at create is reached through the exec
// relay (an HTTP request and its whole answer, the server's close ending the read); a
// port nobody listens on is an error; closing the conn ends the relay inside.
func TestDialPortRelay(t *testing.T) {
	host := modaltest.NewImageEngine(t, local.EngineOptions{})
	_, env := imageServer(t, host)
	e := newProvider(t, env).Engine()
	e.image = BaseImage{Def: image.Image{From: imagetest.BaseRef}}
	ctx := t.Context()
	in, err := e.Create(ctx, engine.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Terminate(ctx, in.ID)
	const port = 8001
	modaltest.ServeHTTP(t, host.Engine, engineID(t, host.Engine, in.ID), port, "via the relay")

	c, err := e.DialPort(ctx, in.ID, port)
	if err != nil {
		t.Fatalf("DialPort without a tunnel: %v", err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	resp, err := io.ReadAll(c) // HTTP/1.0: the server closes after the answer
	c.Close()
	if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.0 200") || !strings.HasSuffix(string(resp), "via the relay") {
		t.Errorf("through the relay: %q, %v", resp, err)
	}

	if c, err := e.DialPort(ctx, in.ID, port+1); err == nil {
		c.Close()
		t.Errorf("DialPort to a port nobody listens on succeeded")
	}

	// A connection the client closes while the server keeps it open.
	c, err = e.DialPort(ctx, in.ID, port)
	if err != nil {
		t.Fatal(err)
	}
	relays := func() string {
		var out bytes.Buffer
		e.Exec(ctx, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c",
			`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -E '^(cat|bash -c exec 3)' || true`}, Stdout: &out})
		return strings.TrimSpace(out.String())
	}
	if relays() == "" {
		t.Fatal("no relay process while connected: the check below proves nothing")
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for left := relays(); left != ""; left = relays() {
		if time.Now().After(deadline) {
			t.Errorf("relay processes left after Close:\n%s", left)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}
