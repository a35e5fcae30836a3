package coderun

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Acceptance 1: the first run_code boots the session, a second sees its variables,
// console.log lands in stdout, packages import by name.
func TestRunCodeIsAREPL(t *testing.T) {
	var log bytes.Buffer
	r, progress := newRunner(t, testConfig(t, ""), Options{})
	_ = log
	s := session(t, r, "repl")
	tests := []struct{ code, result, stdout string }{
		{"1 + 1", "2", ""},
		{"const x: number = 40; console.log('hello', {a: 1}); x + 2", "42", "hello { a: 1 }\n"},
		{"x * 2", "80", ""},
		{"import isOdd from 'is-odd'; [isOdd(3), isOdd(4)]", "[true,false]", ""},
		{"isOdd(5)", "true", ""},
		{"async function f(n: number) { return n + 1 }\nawait f(x)", "41", ""},
		{"Promise.resolve({ok: true})", `{"ok":true}`, ""},
		{"class P { v = 7 }\nnew P()", `{"v":7}`, ""},
		{"let u", "", ""},
	}
	for _, tt := range tests {
		res := run(t, s, tt.code)
		if !res.Success || string(res.Result) != tt.result || res.Stdout != tt.stdout {
			t.Errorf("RunCode(%q) = %+v (result %s), want result %s stdout %q", tt.code, res, res.Result, tt.result, tt.stdout)
		}
	}
	if strings.Contains(progress.String(), testSecret) {
		t.Error("the secret shows in the progress output")
	}
}

// Acceptance 3: network, environment, files and processes are walled in by Deno; the
// secret's value is in no environment of the sandbox, code reads its placeholder.
func TestPermissions(t *testing.T) {
	var logs bytes.Buffer
	r, progress := newRunner(t, testConfig(t, ""), Options{Logger: newTestLogger(&logs)})
	s := session(t, r, "perms")
	denied := []struct{ code, want string }{
		{`await fetch("https://example.com/")`, `NotCapable: "example.com" is not in this sandbox's hosts; code can reach only: api.example.test`},
		{`Deno.env.get("HOME")`, `NotCapable: the environment variable "HOME" is not available`},
		{`Deno.readTextFileSync("/etc/hostname")`, `NotCapable: "/etc/hostname" cannot be read; code reads files under /workspace`},
		{`Deno.writeTextFileSync("/home/user/.coderun/x", "")`, `NotCapable: "/home/user/.coderun/x" cannot be written; code writes files under /workspace`},
		{`new Deno.Command("sh").outputSync()`, `NotCapable: subprocesses cannot be started in this sandbox`},
		{`Deno.dlopen("libc.so.6", {})`, `NotCapable: native libraries (FFI) are not available`},
	}
	for _, tt := range denied {
		res := run(t, s, tt.code)
		if res.Success || !strings.Contains(res.Error, tt.want) {
			t.Errorf("RunCode(%q) = %+v, want an error with %q", tt.code, res, tt.want)
		}
	}
	// Code reads the secret's placeholder, never its value.
	res := run(t, s, `Deno.env.get("CODERUN_TEST_TOKEN")`)
	var ph string
	if !res.Success || json.Unmarshal(res.Result, &ph) != nil || ph == testSecret || len(ph) != len(testSecret) {
		t.Errorf("the secret from code = %+v (result %s), want a placeholder shaped like the value", res, res.Result)
	}
	// No process of the sandbox has the value in its environment; the REPL has the
	// placeholder.
	id, _ := s.Sandbox(t.Context())
	st, _ := s.state()
	scan := func(pattern string) []string {
		t.Helper()
		var out bytes.Buffer
		code, err := r.eng.Exec(t.Context(), id, engine.ExecRequest{Argv: []string{"sh", "-c",
			`for f in /proc/[0-9]*/environ; do if grep -q "$TOKEN" "$f" 2>/dev/null; then echo "${f#/proc/}"; fi; done; echo end`},
			Env: []string{"TOKEN=" + pattern}, Stdout: &out, Stderr: &out})
		if err != nil || code != 0 {
			t.Fatalf("scan environments: %d %v %s", code, err, out.String())
		}
		return strings.Fields(out.String())
	}
	// The pattern matches the value without containing it, so the scanning sh is not
	// a match.
	if got := scan(testSecret[:8] + "[" + testSecret[8:9] + "]" + testSecret[9:]); !slices.Equal(got, []string{"end"}) {
		t.Errorf("processes with the secret's value in their environment: %q, want none", got)
	}
	if ph != "" {
		if got := scan("CODERUN_TEST_TOKEN=" + ph[:1] + "[" + ph[1:2] + "]" + ph[2:]); !slices.Contains(got, itoa(st.Pid)+"/environ") {
			t.Errorf("processes with the placeholder in their environment: %q, want the REPL's (pid %d) among them", got, st.Pid)
		}
	}
	if strings.Contains(logs.String(), testSecret) || strings.Contains(progress.String(), testSecret) {
		t.Error("the secret shows in the logs or the progress output")
	}
	// The engine's wall: a process of the sandbox that Deno lets reach any host (not
	// the REPL) still gets only the allowed hosts from the egress proxy, which refuses
	// other names before resolving them (so the request never leaves the machine).
	if !r.eng.Capabilities().Isolated {
		return
	}
	var out bytes.Buffer
	probe := `const r = await fetch("http://example.com/"); console.log(r.status, await r.text())`
	code, err := r.eng.Exec(t.Context(), id, engine.ExecRequest{Argv: []string{"sh", "-c",
		`printf '%s' "$0" > /tmp/probe.ts && exec ` + rules.CoderunDeno + ` run --no-prompt --allow-net /tmp/probe.ts`, probe},
		Env: []string{"DENO_DIR=/tmp/probe-deno", "NO_COLOR=1"}, Stdout: &out, Stderr: &out, Timeout: 30 * time.Second})
	if err != nil || code != 0 || !strings.HasPrefix(out.String(), "403 ") || !strings.Contains(out.String(), "not in the sandbox's egress hosts") {
		t.Errorf("fetch of a host not in hosts, past Deno = exit %d %v %q, want 403 from the engine's egress proxy", code, err, out.String())
	}
}

// Acceptance 5: each failure is success false with a clear error, and the next call
// works.
func TestFailuresKeepTheSessionUsable(t *testing.T) {
	c := testConfig(t, "")
	c.Timeout = 3 * time.Second
	r, _ := newRunner(t, c, Options{})
	s := session(t, r, "failures")
	// Running out of memory takes V8 a few seconds of collections near its heap limit
	// on a loaded machine: those calls get a session whose timeout cannot win the race.
	c.Timeout = 60 * time.Second
	rSlow, _ := newRunner(t, c, Options{})
	sSlow := session(t, rSlow, "failures-memory")
	tests := []struct{ name, code, want string }{
		{"thrown", `throw new Error("boom")`, "Error: boom"},
		{"syntax", `const = ;`, "SyntaxError"},
		{"type error", `null.x`, "TypeError"},
		{"timeout", `await new Promise((r) => setTimeout(r, 60_000))`, "timed out after 3s"},
		{"endless loop", `while (true) {}`, "timed out after 3s"},
		{"2 GB allocation", `const big = []; for (let i = 0; i < 2048; i++) big.push(new Array(1 << 17).fill(i)); big.length`, "out of memory"},
		{"export", `export default 1`, "export is not supported"},
		{"2 GB outside the heap", `new Uint8Array(2 * 1024 ** 3).fill(1).length`, "memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "2 GB outside the heap" && !r.eng.Capabilities().Limits {
				t.Skip("the engine applies no memory limit here: an ArrayBuffer is outside V8's heap limit")
			}
			s := s
			if strings.HasPrefix(tt.name, "2 GB") {
				s = sSlow
			}
			res := run(t, s, tt.code)
			if res.Success || !strings.Contains(res.Error, tt.want) {
				t.Errorf("RunCode(%q) = %+v, want an error with %q", tt.code, res, tt.want)
			}
			if strings.Contains(res.Error, rules.CoderunDepsDir+"/repl.") {
				t.Errorf("RunCode(%q): the error shows the REPL server's own frames: %q", tt.code, res.Error)
			}
			if res := run(t, s, "1 + 1"); !res.Success || string(res.Result) != "2" {
				t.Errorf("the call after %s = %+v", tt.name, res)
			}
		})
	}
}

// A new session adopts a spare sandbox (REPL up, fresh volume); a replacement boots in
// the background; a session with a volume of its own does not take one.
func TestSpareSandbox(t *testing.T) {
	r, _ := newRunner(t, testConfig(t, ""), Options{Spares: 1, ReapEvery: -1})
	ctx := t.Context()
	t.Cleanup(func() { r.DropSpares(context.Background()) })
	if err := r.FillSpares(ctx); err != nil {
		t.Fatal(err)
	}
	s := session(t, r, "spare-user")
	if res := run(t, s, `await Deno.writeTextFile("/workspace/f", "x"); 40 + 2`); !res.Success || string(res.Result) != "42" {
		t.Fatalf("first run on a spare = %+v", res)
	}
	if !strings.HasPrefix(s.Volume(), "coderun-") || s.Volume() == volumeName(s.ID()) {
		t.Errorf("volume = %q, want the spare's", s.Volume())
	}
	vols, _ := r.store.Volumes(ctx)
	if !slices.ContainsFunc(vols, func(v docsearch.Volume) bool { return v.Name == s.Volume() && v.Session == "spare-user" }) {
		t.Errorf("the adopted volume is not registered: %+v", vols)
	}
	// The file survives a new sandbox (not a spare: the session has its volume).
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if res := run(t, s, `Deno.readTextFileSync("/workspace/f")`); !res.Success || string(res.Result) != `"x"` {
		t.Errorf("after close = %+v", res)
	}
	r.wg.Wait() // the refill
	n := 0
	r.withState(func(m map[string]*sessionState) error {
		for k := range m {
			if isSpare(k) {
				n++
			}
		}
		return nil
	})
	if n != 1 {
		t.Errorf("%d spares after the refill, want 1", n)
	}
}

// Two runners on one data dir (two CLI calls at once) share a session's sandbox
// instead of booting two.
func TestConcurrentCallsShareTheSandbox(t *testing.T) {
	c := testConfig(t, "")
	r1, _ := newRunner(t, c, Options{ReapEvery: -1})
	r2, _ := newRunner(t, c, Options{ReapEvery: -1})
	if _, err := r1.EnsureSnapshot(t.Context()); err != nil {
		t.Fatal(err)
	}
	s1, s2 := session(t, r1, "concurrent"), session(t, r2, "concurrent")
	results := make(chan RunResult, 2)
	for _, s := range []*Session{s1, s2} {
		go func() {
			res, err := s.RunCode(context.Background(), "globalThis.n = (globalThis.n ?? 0) + 1", "")
			if err != nil {
				res.Error = err.Error()
			}
			results <- res
		}()
	}
	var got []string
	for range 2 {
		res := <-results
		got = append(got, string(res.Result)+res.Error)
	}
	slices.Sort(got)
	if strings.Join(got, " ") != "1 2" {
		t.Errorf("results = %q, want 1 and 2 (one REPL, one sandbox)", got)
	}
	list, _ := r1.eng.List(t.Context())
	n := 0
	for _, i := range list {
		if i.State == engine.StateRunning && i.Labels["coderun-session"] == "concurrent" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d running sandboxes for the session, want 1", n)
	}
}

// The background loop of a long-lived runner reaps idle sandboxes and expired volumes.
func TestBackgroundCleanup(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r, _ := newRunner(t, testConfig(t, "volume_ttl_minutes = 1\n"), Options{Now: clock, ReapEvery: 20 * time.Millisecond})
	s := session(t, r, "background")
	if res := run(t, s, "1"); !res.Success {
		t.Fatal(res)
	}
	mu.Lock()
	now = now.Add(10 * time.Minute)
	mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		alive, err := r.volumeAlive(t.Context(), s.Volume())
		sb, _ := s.Sandbox(t.Context())
		if err == nil && !alive && sb == "" {
			return
		}
	}
	t.Error("the background loop left the idle sandbox or the expired volume")
}
