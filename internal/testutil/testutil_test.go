package testutil

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFreePortIsFree(t *testing.T) {
	port := FreePort(t)
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on FreePort() = %d: %v", port, err)
	}
	ln.Close()
}

func TestEchoApp(t *testing.T) {
	port := EchoApp(t, "hi")
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "hi" || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("GET echo app = %q (X-Frame-Options %q), want \"hi\" with DENY", b, resp.Header.Get("X-Frame-Options"))
	}
}

// TestKillGroupKillsGrandchildren: the group goes, not only its leader.
func TestKillGroupKillsGrandchildren(t *testing.T) {
	cmd := exec.Command("bash", "-c", "sleep 300 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := StartGroup(t, cmd); err != nil {
		t.Fatal(err)
	}
	var child int
	b := make([]byte, 32)
	n, _ := out.Read(b)
	if child, err = strconv.Atoi(string(b[:n-1])); err != nil {
		t.Fatalf("read child pid %q: %v", b[:n], err)
	}
	KillGroup(cmd)
	KillGroup(cmd) // harmless once reaped
	deadline := time.Now().Add(10 * time.Second)
	// The grandchild was bash's; once killed it is gone, or a zombie until
	// whatever reaps orphans here (not always an init that does) gets to it.
	for !errors.Is(syscall.Kill(child, 0), syscall.ESRCH) && !zombie(child) {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still exists 10s after KillGroup", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zombie reports whether pid has exited but is not reaped yet.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
