package modalserver

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// http2Preface is what an HTTP/2 client sends first: the connection preface and an
// empty SETTINGS frame. After it a connection has done its handshake and is idle.
var http2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// closedWithin reads c until the server closes it or d passes; it reports whether
// the server closed it.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// Issue 31: the local Modal server held idle connections that never authenticated
// (500 were held 75 s). A connection that sends nothing, and one that does the HTTP/2
// handshake and then nothing, are both closed within 10 s of being accepted.
func TestPreAuthConnectionsClosedWithin10s(t *testing.T) {
	url, _ := startServer(t, modaltest.Engine(t, local.EngineOptions{}))
	addr := strings.TrimPrefix(url, "http://")
	var wg sync.WaitGroup
	var held atomic.Int32
	start := time.Now()
	for i := range 6 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if i%2 == 1 {
			if _, err := c.Write(http2Preface); err != nil {
				t.Fatal(err)
			}
		}
		wg.Go(func() {
			if !closedWithin(c, preAuthTimeout+3*time.Second) {
				held.Add(1)
			}
		})
	}
	wg.Wait()
	if n := held.Load(); n != 0 {
		t.Errorf("%d of 6 pre-auth connections were still open %v after they were accepted, want all closed within %v", n, time.Since(start).Round(time.Second), preAuthTimeout)
	}
	if preAuthTimeout > 10*time.Second {
		t.Errorf("preAuthTimeout = %v, want at most 10s", preAuthTimeout)
	}
}

// Opened faster than they time out, pre-auth connections stay bounded: past
// maxPreAuth the oldest are closed at once.
func TestPreAuthConnectionsBounded(t *testing.T) {
	url, srv := startServer(t, modaltest.Engine(t, local.EngineOptions{}))
	addr := strings.TrimPrefix(url, "http://")
	const n = 300
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	// Every connection has been accepted once the guard has seen the last one,
	// or the server closed it; wait for that, boundedly.
	deadline := time.Now().Add(5 * time.Second)
	for srv.guard.pendingCount() < maxPreAuth && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var wg sync.WaitGroup
	var open atomic.Int32
	for _, c := range conns {
		wg.Go(func() {
			if !closedWithin(c, 2*time.Second) {
				open.Add(1)
			}
		})
	}
	wg.Wait()
	if got := open.Load(); got > maxPreAuth || got == 0 {
		t.Errorf("%d of %d pre-auth connections open, want between 1 and %d", got, n, maxPreAuth)
	}
	if got := srv.guard.pendingCount(); got > maxPreAuth {
		t.Errorf("the server tracks %d pre-auth connections, want at most %d", got, maxPreAuth)
	}
}

// A connection whose call authenticated stays open past the pre-auth timeout; one
// whose calls all failed authentication does not.
func TestAuthenticatedConnectionStays(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	o := Options{Engine: eng}
	o.Token = testToken
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv.guard.timeout = 300 * time.Millisecond
	url := modaltest.Serve(t, srv)
	addr := strings.TrimPrefix(url, "http://")

	for _, tc := range []struct {
		name       string
		md         []string
		reconnects bool
	}{
		{"authenticated", []string{"x-modal-token-id", testToken.ID, "x-modal-token-secret", testToken.Secret}, false},
		{"wrong secret", []string{"x-modal-token-id", testToken.ID, "x-modal-token-secret", "as-wrong"}, true},
	} {
		var dials atomic.Int32
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				dials.Add(1)
				var d net.Dialer
				return d.DialContext(ctx, "tcp", a)
			}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := metadata.AppendToOutgoingContext(t.Context(), tc.md...)
		call := func() {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := pb.NewModalClientClient(conn).AppGetOrCreate(ctx, pb.AppGetOrCreateRequest_builder{AppName: "conns",
				ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING}.Build(), grpc.WaitForReady(true))
			if tc.reconnects == (err == nil) {
				t.Errorf("%s: AppGetOrCreate = %v", tc.name, err)
			}
		}
		call()
		before := dials.Load()
		time.Sleep(4 * srv.guard.timeout)
		call()
		if got := dials.Load(); (got > before) != tc.reconnects {
			t.Errorf("%s: the second call, %v after the first, dialed %d more times, want reconnected %v", tc.name, 4*srv.guard.timeout, got-before, tc.reconnects)
		}
		conn.Close()
	}
}
