package local

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestEngineSecrets is the acceptance of secrets on the local engine: inside, the
// variable holds a placeholder and the value is in nothing root can read; a request
// to the secret's host arrives with the value and its echo comes back scrubbed; the
// placeholder sent elsewhere is refused.
func TestEngineSecrets(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	ip := hostAddr()
	if ip == "" {
		t.Skip("no non-loopback address")
	}
	const value = "sk-ant-api03-N4VALUE0123456789abcdefghij"
	got := make(chan string, 4)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Authorization"):
		default:
		}
		fmt.Fprintf(w, "echo %s", r.Header.Get("Authorization"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	upstream := "http://" + ln.Addr().String()

	e := newTestEngine(t)
	info := createBox(t, e, engine.Spec{Egress: true, Secrets: []engine.Secret{
		{Name: "N4_KEY", Value: value, Hosts: []string{ip}},
		{Name: "OTHER_KEY", Value: "ghp_OTHERVALUE0123456789abcdef", Hosts: []string{"api.other.invalid"}},
	}})
	ph, _ := sh(t, e, info.ID, "printenv", "N4_KEY")
	ph = strings.TrimSpace(ph)
	if ph == "" {
		t.Skip("the local engine does not pass Spec.Secrets to its sandbox and proxy yet")
	}
	if ph == value || !strings.HasPrefix(ph, "sk-ant-api03-") || len(ph) != len(value) {
		t.Errorf("$N4_KEY = %q, want a placeholder shaped like the value", ph)
	}
	// The trust's variables name the bound bundle, and Node's fetch is told to use the
	// proxy.
	if out, _ := sh(t, e, info.ID, "sh", "-c", `printf '%s %s %s' "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS" "$`+rules.EnvNodeUseEnvProxy+`"`); out != rules.TrustBundleFile+" "+rules.TrustBundleFile+" 1" {
		t.Errorf("SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, %s inside = %q, want %s twice and 1", rules.EnvNodeUseEnvProxy, out, rules.TrustBundleFile)
	}
	// The value in nothing root can read: the pattern is written so that the command
	// line searching for it does not hold it.
	pattern := value[:8] + "[" + value[8:9] + "]" + value[9:]
	out, _ := sh(t, e, info.ID, "env", "P="+pattern, "sh", "-c", `grep -rlE "$P" /etc /root /home /tmp /run /var /usr/local /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; echo end`)
	if strings.TrimSpace(out) != "end" {
		t.Errorf("the value is readable inside at: %s", out)
	}
	out, code := sh(t, e, info.ID, "sh", "-c", `curl -sS --max-time 10 -H "Authorization: Bearer $N4_KEY" `+upstream+`/`)
	if code != 0 || out != "echo Bearer "+ph {
		t.Errorf("curl to the secret's host = %d %q, want the echo scrubbed to the placeholder", code, out)
	}
	if a := <-got; a != "Bearer "+value {
		t.Errorf("upstream got %q, want the value", a)
	}
	out, _ = sh(t, e, info.ID, "sh", "-c", `curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $OTHER_KEY" `+upstream+`/`)
	if out != "403" {
		t.Errorf("another secret's placeholder to this host = %q, want 403", out)
	}
}

// TestUnisolatedRefusesSecrets: an unisolated sandbox has no egress proxy, so a spec
// with secrets is refused, naming the option, and no sandbox is left; never created
// with the values dropped.
func TestUnisolatedRefusesSecrets(t *testing.T) {
	u, err := NewEngine(EngineOptions{DataDir: t.TempDir(), Unisolated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	spec := engine.Spec{Egress: true, Secrets: []engine.Secret{{Name: "N4_KEY", Value: "sk-ant-api03-N4VALUE0123456789abcdefghij", Hosts: []string{"api.example.com"}}}}
	_, err = u.Create(t.Context(), spec)
	if !errors.Is(err, engine.ErrUnsupported) || !strings.Contains(err.Error(), "Unisolated") || !strings.Contains(err.Error(), "N4_KEY") {
		t.Errorf("create with a secret on an unisolated engine = %v, want ErrUnsupported naming Unisolated and N4_KEY", err)
	}
	if err != nil && strings.Contains(err.Error(), spec.Secrets[0].Value) {
		t.Errorf("the refusal %q holds the value", err)
	}
	if list, err := u.List(t.Context()); err != nil || len(list) != 0 {
		t.Errorf("after the refusal, List = %v, %v; want no sandbox", list, err)
	}
}
