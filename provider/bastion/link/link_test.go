package link

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParsePreamble(t *testing.T) {
	tests := []struct {
		name, line string
		want       int
		ok         bool
	}{
		{"port", "port 20000\n", 20000, true},
		{"one", "port 1\n", 1, true},
		{"max", "port 65535\n", 65535, true},
		{"zero", "port 0\n", 0, false},
		{"leading zero", "port 080\n", 0, false},
		{"too big", "port 65536\n", 0, false},
		{"six digits", "port 100000\n", 0, false},
		{"sign", "port +80\n", 0, false},
		{"negative", "port -1\n", 0, false},
		{"no newline", "port 80", 0, false},
		{"crlf", "port 80\r\n", 0, false},
		{"two spaces", "port  80\n", 0, false},
		{"trailing", "port 80 x\n", 0, false},
		{"other verb", "host 80\n", 0, false},
		{"empty", "", 0, false},
		{"empty port", "port \n", 0, false},
		{"too long", "port 80" + strings.Repeat(" ", 20) + "\n", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePreamble(tt.line)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParsePreamble(%q) = %d, %v, want %d, ok=%v", tt.line, got, err, tt.want, tt.ok)
			}
		})
	}
}

func FuzzParsePreamble(f *testing.F) {
	for _, s := range []string{"port 80\n", "port 65535\n", "port 0\n", "port 080\n", "", "port \n", "port 1\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		port, err := ParsePreamble(line)
		if err != nil {
			return
		}
		if port < 1 || port > 65535 {
			t.Fatalf("ParsePreamble(%q) = %d: out of range", line, port)
		}
		if Preamble(port) != line {
			t.Fatalf("ParsePreamble(%q) = %d, but Preamble(%d) = %q: the line is not canonical", line, port, port, Preamble(port))
		}
	})
}

// startRelay serves a relay on a unix socket in a temp dir until the test ends.
func startRelay(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	r := &Relay{PreambleTimeout: 2 * time.Second}
	go func() { errc <- r.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock
}

// TestRelayForwards: HTTP through Dial reaches the loopback port named in the
// preamble, over several requests on one connection.
func TestRelayForwards(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	sock := startRelay(t)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return Dial(ctx, sock, port) }}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := range 3 {
		resp, err := c.Get("http://agent/x" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "hello /x" + strconv.Itoa(i); string(b) != want {
			t.Errorf("GET through the relay = %q, want %q", b, want)
		}
	}
}

// TestRelayRefuses: a bad preamble, or none, closes the connection without
// reaching anything.
func TestRelayRefuses(t *testing.T) {
	sock := startRelay(t)
	for _, pre := range []string{"port 0\n", "GET / HTTP/1.1\r\n", "port 99999\n", "port 80"} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, pre)
		b, err := io.ReadAll(c)
		c.Close()
		if len(b) != 0 || err != nil {
			t.Errorf("preamble %q: read %q, %v; want the connection closed with nothing", pre, b, err)
		}
	}
	if _, err := Dial(t.Context(), sock, 0); err == nil {
		t.Error("Dial(port 0) succeeded, want an error")
	}
}
