package api

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// FuzzRawRequest sends arbitrary bytes to a server run as the sidecar runs
// it (HTTPServer) and half-closes: every connection ends promptly, nothing
// but health and preflights answers 2xx without the token, and the server
// keeps answering health.
func FuzzRawRequest(f *testing.F) {
	for _, s := range []string{
		"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /api/services HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
		"POST /api/services HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n",
		"GET /api/services HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\n\r\nGET /api/services HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS /api/services HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /api/terminal HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"GET /api/health/ HTTP/1.0\r\n\r\n",
		"HEAD /api/auth/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ReadTimeout: 2 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	hs, lln := s.HTTPServer(ln, nil)
	hs.ReadHeaderTimeout = 2 * time.Second
	go func() { _ = hs.Serve(lln) }()
	f.Cleanup(func() { hs.Close() })
	addr := ln.Addr().String()
	f.Fuzz(func(t *testing.T, req []byte) {
		if bytes.Contains(req, []byte(testToken)) {
			return // an authorized request is not what this checks
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(req)
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("connection still open 10 s after %q was sent and half-closed", req)
				}
				break
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// Pipelined requests blur which answer is whose: a 2xx is
			// fine when health or a preflight was asked for at all.
			if resp.StatusCode/100 == 2 && !bytes.Contains(req, []byte("/api/health")) && !bytes.Contains(req, []byte("OPTIONS")) {
				t.Fatalf("%d without a token for %q", resp.StatusCode, req)
			}
		}
	})
}
