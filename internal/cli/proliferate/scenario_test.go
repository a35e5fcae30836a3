package proliferate

import (
	"strings"
	"testing"
)

// servicesScenario drives list/start/restart/expose/logs/stop through the real
// entry point against whatever sidecar env points at: the stand-in here, a
// real `sandbox-mcp api` in an end-to-end test. It checks only what the
// contract promises, and the commands it starts are real shell commands.
func servicesScenario(t *testing.T, env map[string]string) {
	t.Helper()
	ctx := t.Context()
	must := func(args ...string) map[string]any {
		t.Helper()
		r := cli(t, ctx, env, nil, args...)
		if r.code != 0 {
			t.Fatalf("run(%q) = %d, stderr %q", args, r.code, r.stderr)
		}
		return decodeLine(t, r.stdout)
	}
	service := func(m map[string]any) map[string]any {
		t.Helper()
		s, ok := m["service"].(map[string]any)
		if !ok {
			t.Fatalf("answer %v has no service", m)
		}
		return s
	}
	names := func() []string {
		var out []string
		for _, s := range must("services", "list")["services"].([]any) {
			out = append(out, s.(map[string]any)["name"].(string))
		}
		return out
	}

	if _, ok := must("services", "list")["exposedPort"]; !ok {
		t.Error("list has no exposedPort")
	}
	s := service(must("services", "start", "--name", "scenario-web", "--command", "echo hello from web; sleep 30"))
	if s["name"] != "scenario-web" || s["status"] != "running" {
		t.Errorf("start = %v, want scenario-web running", s)
	}
	if got := names(); !contains(got, "scenario-web") {
		t.Errorf("list = %q, want scenario-web in it", got)
	}
	if s := service(must("services", "restart", "--name", "scenario-web")); s["status"] != "running" || s["command"] != "echo hello from web; sleep 30" {
		t.Errorf("restart = %v, want the same command running", s)
	}
	if r := cli(t, ctx, env, nil, "services", "expose", "--port", "3000"); r.code == 0 {
		if m := decodeLine(t, r.stdout); m["exposedPort"] != float64(3000) {
			t.Errorf("expose = %v, want exposedPort 3000", m)
		}
	} else if r.code != 1 || !strings.HasPrefix(r.stderr, "Error: ") {
		t.Errorf("expose = %d %q, want 0, or 1 with the sidecar's reason", r.code, r.stderr)
	}
	logs := must("services", "logs", "--name", "scenario-web")
	if logs["type"] != "initial" || !strings.Contains(logs["content"].(string), `Service "scenario-web" started`) {
		t.Errorf("logs = %v, want the initial frame with the start marker", logs)
	}
	if m := must("services", "stop", "--name", "scenario-web"); m["success"] != true {
		t.Errorf("stop = %v", m)
	}
	for _, args := range [][]string{{"services", "stop", "--name", "scenario-nope"}, {"services", "restart", "--name", "scenario-nope"}} {
		if r := cli(t, ctx, env, nil, args...); r.code != 1 || r.stderr != `Error: Service "scenario-nope" not found`+"\n" {
			t.Errorf("run(%q) = %d %q, want 1 not found", args, r.code, r.stderr)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestServicesScenarioStandIn(t *testing.T) {
	_, env := newSidecar(t)
	servicesScenario(t, env)
}
