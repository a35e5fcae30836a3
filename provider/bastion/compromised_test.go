package bastion_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// previewPort is the agent's dev server in the tests; hostilePort the
// listener the attacker opens.
const previewPort, hostilePort = 3000, 7777

// previewServer answers every GET with its path and the Authorization it got.
const previewServer = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        b = ("preview %s auth=%s" % (self.path, self.headers.get("Authorization", ""))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((HOST, PORT), H).serve_forever()
`

// pair is a bastion session under test.
type pair struct {
	p        *provider.Provider
	eng      engine.Engine
	hc       *http.Client // reaches the controller's ingress
	portHost func(t *testing.T, id string, port int, path string) *http.Request
	res      provider.BastionResult
	session  string
	platform string
}

// get is a GET of the ingress with an optional bearer token; it returns the
// status and body.
func (s *pair) get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	return getWith(t, s.hc, url, token)
}

// gate runs args through the git gate's socket from inside the agent and
// returns the HTTP status and body.
func (s *pair) gate(t *testing.T, args ...string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string][]string{"args": args})
	sock := path.Join(provider.DefaultPaths().Workspace(), rules.BastionDir, rules.BastionGitSocket)
	out, code := sh(t, s.eng, s.res.AgentID, `curl -sS --max-time 120 --unix-socket `+sock+` -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' -d '`+string(body)+`' http://gate/v1/git`)
	if code != 0 {
		t.Fatalf("curl to the gate: exit %d: %s", code, out)
	}
	i := strings.LastIndex(out, "\n")
	status, _ := strconv.Atoi(out[i+1:])
	return status, out[:i]
}

// regex is s as an extended regular expression that matches s but not
// itself: a command line or environment that holds the pattern holds no
// match.
func regex(s string) string { return s[:6] + "[" + s[6:7] + "]" + s[7:] }

// TestBastionCompromisedAgent: root inside the agent sandbox of a bastion
// session tries everything model C promises it cannot do, and fails; the
// session's legitimate paths work meanwhile: a preview through the
// controller's ingress, a push through the gate landing on session/<id>, an
// LLM call arriving upstream with the real key.
func TestBastionCompromisedAgent(t *testing.T) {
	requireEngine(t)
	for _, tc := range targets {
		t.Run(tc.name, func(t *testing.T) { compromisedAgent(t, tc) })
	}
}

// compromisedAgent is TestBastionCompromisedAgent on one engine.
func compromisedAgent(t *testing.T, tc target) {
	addr := hostAddress(t)
	gitToken := "ghp_" + randomHex(t, 16)
	llmKey := "sk-ant-api03-" + randomHex(t, 20)
	remote := serveGit(t, addr, gitToken)
	llmURL, llmKeys := serveLLM(t, addr)
	env := tc.start(t, strings.TrimPrefix(llmURL, "http://"))
	p, eng := env.p, env.eng
	s := &pair{p: p, eng: eng, hc: env.hc, portHost: env.portHost, session: "bastion-" + randomHex(t, 4), platform: "plat-" + randomHex(t, 16)}
	secrets := map[string]string{"platform token": s.platform, "git token": gitToken, "LLM key": llmKey}
	spec := engine.Spec{Secrets: []engine.Secret{{Name: "ANTHROPIC_API_KEY", Value: llmKey, Hosts: []string{addr}}}}
	if env.gw != nil {
		// The agent's one way to the gateway: its engine's proxy, which
		// reaches the gateway's address (the host's own) and nothing else.
		spec.EgressHosts = []string{env.gw.IP}
	}
	start := time.Now()
	res, err := p.CreateBastion(t.Context(), provider.CreateOptions{SessionID: s.session, Spec: spec},
		provider.BastionOptions{PlatformToken: s.platform, RepoURL: remote.url, RepoToken: gitToken,
			AgentPorts: []int{provider.PortSandboxMCP, provider.PortPreview, previewPort}})
	if err != nil {
		t.Fatalf("CreateBastion: %v", err)
	}
	s.res = res
	t.Logf("bastion session up in %v: agent %s, controller %s", time.Since(start).Round(time.Millisecond), res.AgentID, res.ControllerID)
	t.Cleanup(func() { endPair(eng, p, s.session, res) })

	checkShape(t, s)
	legitimate(t, s, remote)
	llmCall(t, s, env.gw, llmURL, llmKeys, llmKey)
	hostile(t, s, remote, secrets)
	pausePair(t, s)

	// terminate of either ends both.
	if err := p.Terminate(t.Context(), s.session, res.ControllerID); err != nil {
		t.Fatalf("Terminate(controller): %v", err)
	}
	for _, id := range []string{res.AgentID, res.ControllerID} {
		if !waitGone(t, eng, id) {
			t.Errorf("sandbox %s still runs after Terminate of the controller", id)
		}
	}
}

// pausePair: where the engine pauses, PausePair and ResumePair act on the
// pair and the agent answers through the ingress afterwards; where it cannot
// (Modal), the pair's pause is refused, not half done.
func pausePair(t *testing.T, s *pair) {
	t.Helper()
	handled, err := s.p.PausePair(t.Context(), s.res.AgentID)
	if !s.eng.Capabilities().Pause {
		if !handled || err == nil {
			t.Errorf("PausePair on an engine without pause = %v, %v; want it handled and refused", handled, err)
		}
		for _, id := range []string{s.res.AgentID, s.res.ControllerID} {
			if info, err := s.eng.Get(t.Context(), id); err != nil || info.State != engine.StateRunning {
				t.Errorf("after a refused PausePair, %s is %s (%v), want running", id, info.State, err)
			}
		}
		return
	}
	if !handled || err != nil {
		t.Fatalf("PausePair = %v, %v; want the pair paused", handled, err)
	}
	for _, id := range []string{s.res.AgentID, s.res.ControllerID} {
		if info, err := s.eng.Get(t.Context(), id); err != nil || info.State != engine.StatePaused {
			t.Errorf("after PausePair, %s is %s (%v), want paused", id, info.State, err)
		}
	}
	if handled, err := s.p.ResumePair(t.Context(), s.res.ControllerID); !handled || err != nil {
		t.Fatalf("ResumePair = %v, %v; want the pair resumed", handled, err)
	}
	// The local E2B server forwards a port anew after a resume: ask again.
	ingress := s.res.IngressURL
	if pu, ok := s.eng.(engine.PortURLer); ok {
		u, err := pu.PortURL(t.Context(), s.res.ControllerID, rules.PortBastionIngress)
		if err != nil {
			t.Fatalf("the controller's ingress after ResumePair: %v", err)
		}
		ingress = u
	}
	health := ingress + rules.BastionPortPrefix + strconv.Itoa(provider.PortSandboxMCP) + "/api/health"
	var code int
	for range 50 {
		if code, _ = s.get(t, health, s.platform); code == 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 200 {
		t.Errorf("the agent's health through the ingress after ResumePair = %d, want 200", code)
	}
}

// checkShape: the agent has no tunnel, the controller only the ingress; both
// are labelled with their role and the session.
func checkShape(t *testing.T, s *pair) {
	t.Helper()
	for id, role := range map[string]string{s.res.AgentID: rules.RoleAgent, s.res.ControllerID: rules.RoleController} {
		info, err := s.eng.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Labels[rules.LabelRole] != role || info.Labels[rules.LabelSession] != s.session {
			t.Errorf("labels of the %s = %v, want role=%s session=%s", role, info.Labels, role, s.session)
		}
		var ports []int
		for _, tu := range info.Tunnels {
			ports = append(ports, tu.Port)
		}
		// The agent has none; the controller the ingress only (an engine
		// whose ports all have public hosts, E2B, lists none).
		if slices.ContainsFunc(ports, func(p int) bool { return role == rules.RoleAgent || p != rules.PortBastionIngress }) {
			t.Errorf("tunnels of the %s = %v, want none but the controller's ingress (%d)", role, ports, rules.PortBastionIngress)
		}
	}
	if !strings.HasPrefix(s.res.SandboxMCPURL, s.res.IngressURL+rules.BastionPortPrefix) {
		t.Errorf("SandboxMCPURL = %q, want it under the ingress %q", s.res.SandboxMCPURL, s.res.IngressURL)
	}
}

// legitimate: the session's own paths work.
func legitimate(t *testing.T, s *pair, remote gitRemote) {
	t.Helper()
	st := s.eng.(engine.Starter)
	script := strings.NewReplacer("HOST", `"127.0.0.1"`, "PORT", strconv.Itoa(previewPort)).Replace(previewServer)
	if _, err := st.StartDetached(t.Context(), s.res.AgentID, engine.ExecRequest{Argv: []string{"python3", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	u := s.res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(previewPort) + "/hello"
	var code int
	var body string
	for range 100 {
		if code, body = s.get(t, u, s.platform); code == 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 200 || body != "preview /hello auth=" {
		t.Errorf("preview through the ingress with the token = %d %q, want 200 %q (the token stripped)", code, body, "preview /hello auth=")
	}
	if code, _ := s.get(t, u, ""); code != 401 {
		t.Errorf("preview through the ingress without a token = %d, want 401", code)
	}
	if code, _ := s.get(t, u, "wrong-"+s.platform); code != 401 {
		t.Errorf("preview through the ingress with a wrong token = %d, want 401", code)
	}

	// The agent's sidecar API through the ingress: the platform's token in,
	// the sidecar's own token added by the controller.
	api := s.res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(provider.PortSandboxMCP) + "/api/services"
	if code, body := s.get(t, api, s.platform); code != 200 || !strings.Contains(body, `"services"`) {
		t.Errorf("GET the sidecar's /api/services through the ingress = %d %q, want 200 and the services", code, body)
	}
	if code, _ := s.get(t, api, ""); code != 401 {
		t.Errorf("GET the sidecar's /api/services through the ingress without a token = %d, want 401", code)
	}

	// A push through the gate lands on session/<id>, main untouched.
	ws := path.Join(provider.DefaultPaths().Workspace(), "app")
	if out, code := sh(t, s.eng, s.res.AgentID, "echo feature > "+ws+"/feature.txt"); code != 0 {
		t.Fatalf("write in the agent's work tree: %s", out)
	}
	for _, args := range [][]string{{"add", "feature.txt"}, {"commit", "-m", "feature"}, {"push", "origin", "HEAD:refs/heads/session/" + s.session}} {
		code, body := s.gate(t, args...)
		var r struct{ ExitCode int }
		_ = json.Unmarshal([]byte(body), &r)
		if code != 200 || r.ExitCode != 0 {
			t.Fatalf("gate %q = %d %s, want 200 and exit code 0", args, code, body)
		}
	}
	if got := git(t, remote.bare, "log", "-1", "--format=%s", "refs/heads/session/"+s.session); got != "feature" {
		t.Errorf("remote session/%s = %q, want the commit feature", s.session, got)
	}
	if got := git(t, remote.bare, "rev-parse", "refs/heads/main"); got != remote.main {
		t.Errorf("remote main = %s, want it untouched at %s", got, remote.main)
	}
}

// hostile: root inside the agent tries each attack; each must fail.
func hostile(t *testing.T, s *pair, remote gitRemote, secrets map[string]string) {
	t.Helper()
	// Every value, in every file and process environment root can read; a
	// canary written inside proves the search finds what is there.
	canary := "canary-" + randomHex(t, 8)
	sh(t, s.eng, s.res.AgentID, "echo "+canary+" > /tmp/canary")
	if out, _ := sh(t, s.eng, s.res.AgentID, `P='`+regex(canary)+`'; grep -rlE "$P" /tmp 2>/dev/null`); strings.TrimSpace(out) != "/tmp/canary" {
		t.Fatalf("the search found the canary at %q, want /tmp/canary: the search proves nothing", out)
	}
	for name, v := range secrets {
		out, _ := sh(t, s.eng, s.res.AgentID, `P='`+regex(v)+`'; grep -rlE "$P" /etc /root /home /tmp /run /var /usr/local /opt /srv /mnt `+
			`/proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; echo end`)
		if strings.TrimSpace(out) != "end" {
			t.Errorf("the %s is readable inside the agent at: %s", name, out)
		}
	}
	// The gate's denied commands, a push to main among them.
	for _, args := range [][]string{
		{"push", "origin", "HEAD:refs/heads/main"},
		{"push", "--force", "origin", "HEAD:refs/heads/session/" + s.session},
		{"push", "origin", "HEAD:refs/heads/session/other"},
		{"config", "user.name", "x"},
		{"remote", "add", "evil", "http://evil.invalid/x.git"},
		{"-c", "core.hooksPath=/tmp", "status"},
		{"--git-dir=/home/user/.bastion-git", "status"},
		{"diff", "--output=/tmp/x"},
		{"clone", remote.url},
		{"checkout", "main"},
	} {
		if code, body := s.gate(t, args...); code != 403 {
			t.Errorf("gate %q = %d %s, want 403", args, code, body)
		}
	}
	if got := git(t, remote.bare, "rev-parse", "refs/heads/main"); got != remote.main {
		t.Errorf("remote main = %s after the attempts, want it untouched", got)
	}

	// The controller's credentials and its other ports.
	script := `ls ` + rules.BastionGitDir + ` >/dev/null 2>&1 && echo "BROKEN the controller's git directory is visible"
curl -s --max-time 5 -o /dev/null http://127.0.0.1:` + strconv.Itoa(rules.PortBastionIngress) + `/ && echo "BROKEN an ingress port in the agent"
`
	// The controller's ingress from inside the agent: its host side is not
	// the agent's to reach, directly or through the egress proxy.
	health := s.res.IngressURL + rules.BastionHealthPath
	script += `curl -sk --max-time 5 -o /dev/null --noproxy '*' ` + health + ` && echo "BROKEN the controller's ingress ` + health + ` directly"
curl -sk --max-time 5 -o /dev/null -w '%{http_code}' ` + health + ` | grep -q 200 && echo "BROKEN the controller's ingress ` + health + ` through the proxy"
`
	// A listener of its own, and its own sidecar and Caddy rewritten to open
	// ingress without the token.
	listener := strings.NewReplacer("HOST", `"0.0.0.0"`, "PORT", strconv.Itoa(hostilePort)).Replace(previewServer)
	script += `(python3 -c '` + listener + `' >/dev/null 2>&1 &)
printf ':20000 {\n\trespond "open"\n}\n' > /home/user/Caddyfile && (caddy reload --config /home/user/Caddyfile --adapter caddyfile >/dev/null 2>&1 || true)
sleep 1
echo done`
	out, _ := sh(t, s.eng, s.res.AgentID, script)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "BROKEN") {
			t.Error(line)
		}
	}
	info, err := s.eng.Get(t.Context(), s.res.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Tunnels) != 0 {
		t.Errorf("the agent has tunnels %v after the attack, want none", info.Tunnels)
	}
	for _, port := range []int{hostilePort, provider.PortPreview, provider.PortSandboxMCP} {
		u := s.res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(port) + "/"
		if code, body := s.get(t, u, ""); code != 401 {
			t.Errorf("GET %s without the platform's token = %d %q, want 401", u, code, body)
		}
	}
	// The engine's own public side of the agent's ports (E2B's port hosts):
	// the attacker's listener and the sidecar answer nothing there.
	if pu, ok := s.eng.(engine.PortURLer); ok {
		for _, port := range []int{hostilePort, provider.PortSandboxMCP} {
			u, err := pu.PortURL(t.Context(), s.res.AgentID, port)
			if err != nil {
				continue // no public URL at all
			}
			if code, body := s.get(t, u+"/", ""); code < 400 {
				t.Errorf("the agent's port %d at the engine's %s = %d %q, want a refusal", port, u, code, body)
			}
		}
	}
	if s.portHost != nil {
		// The controller's ingress answers on its port host: the route works,
		// so a 403 for the agent's is the traffic token's doing.
		for _, c := range []struct {
			id, path string
			port     int
			want     int
		}{
			{s.res.ControllerID, rules.BastionHealthPath, rules.PortBastionIngress, http.StatusOK},
			{s.res.AgentID, "/", hostilePort, http.StatusForbidden},
			{s.res.AgentID, "/api/health", provider.PortSandboxMCP, http.StatusForbidden},
		} {
			req := s.portHost(t, c.id, c.port, c.path)
			resp, err := s.hc.Do(req)
			if err != nil {
				t.Fatalf("GET the port host %s: %v", req.Host, err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("GET %s%s without the traffic token = %d, want %d", req.Host, c.path, resp.StatusCode, c.want)
			}
		}
	}
	if code, _ := s.get(t, s.res.IngressURL+rules.BastionPortPrefix+strconv.Itoa(hostilePort)+"/", s.platform); code != 403 {
		t.Errorf("the attacker's port through the ingress with the token = %d, want 403 (not an agent port of the session)", code)
	}
}

// TestBastionLifecycle: pause and resume act on the pair (PausePair,
// ResumePair); the platform's single pause and snapshot of either half are
// refused; one half dying ends the other (WatchBastion); an engine without
// volumes refuses the option.
func TestBastionLifecycle(t *testing.T) {
	requireEngine(t)
	p, eng := newProvider(t)
	session, token := "bastion-"+randomHex(t, 4), "plat-"+randomHex(t, 16)
	res, err := p.CreateBastion(t.Context(), provider.CreateOptions{SessionID: session},
		provider.BastionOptions{PlatformToken: token})
	if err != nil {
		t.Fatalf("CreateBastion: %v", err)
	}
	t.Cleanup(func() { endPair(eng, p, session, res) })
	for _, id := range []string{res.AgentID, res.ControllerID} {
		if _, err := p.Pause(t.Context(), session, id); err == nil || !errors.Is(err, engine.ErrUnsupported) {
			t.Errorf("Pause(%s) = %v, want a refusal (ErrUnsupported)", id, err)
		}
		if _, err := p.Snapshot(t.Context(), session, id); err == nil || !errors.Is(err, engine.ErrUnsupported) {
			t.Errorf("Snapshot(%s) = %v, want a refusal (ErrUnsupported)", id, err)
		}
	}
	// Pause and resume act on the pair, whichever half is named; the ingress
	// reaches the agent again afterwards.
	if handled, err := p.PausePair(t.Context(), res.AgentID); !handled || err != nil {
		t.Fatalf("PausePair = %v, %v; want the pair paused", handled, err)
	}
	for _, id := range []string{res.AgentID, res.ControllerID} {
		if info, err := eng.Get(t.Context(), id); err != nil || info.State != engine.StatePaused {
			t.Errorf("after PausePair, %s is %s (%v), want paused", id, info.State, err)
		}
	}
	if handled, err := p.ResumePair(t.Context(), res.ControllerID); !handled || err != nil {
		t.Fatalf("ResumePair = %v, %v; want the pair resumed", handled, err)
	}
	health := res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(provider.PortSandboxMCP) + "/api/health"
	if code, body := get(t, health, token); code != 200 {
		t.Errorf("the agent's health through the ingress after ResumePair = %d %q, want 200", code, body)
	}
	if handled, _ := p.PausePair(t.Context(), "no-such-sandbox"); handled {
		t.Error("PausePair of an unknown id handled it, want it left to the single pause")
	}

	done := make(chan error, 1)
	go func() { done <- p.WatchBastion(t.Context(), res.AgentID, res.ControllerID, 100*time.Millisecond) }()
	// The agent dies on its own (the engine ends it, not the provider).
	if err := eng.Terminate(t.Context(), res.AgentID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WatchBastion: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("WatchBastion did not end the pair within a minute")
	}
	if !gone(t.Context(), eng, res.ControllerID) {
		t.Error("the controller runs on after its agent died")
	}

	// An engine without volumes cannot link the pair: refused, naming it.
	q, err := provider.New(noVolumes{eng}, provider.Options{Kind: provider.KindE2B})
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.CreateBastion(t.Context(), provider.CreateOptions{SessionID: session}, provider.BastionOptions{PlatformToken: "x"})
	if err == nil || !errors.Is(err, engine.ErrUnsupported) || !strings.Contains(err.Error(), string(provider.KindE2B)) {
		t.Errorf("CreateBastion on an engine without volumes = %v, want a refusal naming it", err)
	}
}

// noVolumes is an engine without volumes.
type noVolumes struct{ engine.Engine }

func (n noVolumes) Capabilities() engine.Capabilities {
	c := n.Engine.Capabilities()
	c.Volumes = false
	return c
}

// endPair terminates a pair and removes its volume, when the test ends
// (t.Context is done by then).
func endPair(eng engine.Engine, p *provider.Provider, session string, res provider.BastionResult) {
	ctx := context.Background()
	p.Terminate(ctx, session, res.AgentID)
	for _, id := range []string{res.AgentID, res.ControllerID} {
		eng.Terminate(ctx, id)
	}
	if v, ok := eng.(engine.Volumes); ok {
		v.RemoveVolume(ctx, res.Volume)
	}
}
