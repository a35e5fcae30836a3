package coderun

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// msConfig is testConfig with the npm package ms, the acceptance's dependency.
func msConfig(t testing.TB, extra string) Config {
	t.Helper()
	return testConfig(t, extra) // it has ms (and @types/ms)
}

// Errors name the line and column of the code the model sent, keep the packages'
// frames, drop the REPL's and Deno's own, and say what the sandbox allows instead of
// which flag to pass; errors of callbacks and unhandled rejections fail the call that
// caused them and leave the REPL up.
func TestErrorsNameTheLine(t *testing.T) {
	r, _ := newRunner(t, msConfig(t, ""), Options{ReapEvery: -1})
	s := session(t, r, "errors")
	tests := []struct {
		name, code string
		want       []string
	}{
		{"thrown in a function", "const a = 1;\nfunction f(x: number) {\n  throw new Error(\"boom \" + x);\n}\nf(a);",
			[]string{"Error: boom 1", "at f (line 3, column 9)", "at line 5, column 1", "3 |   throw new Error"}},
		{"reference error", "const y: number = 2;\nnope + y", []string{"ReferenceError: nope is not defined", "at line 2, column 1"}},
		{"a function of an earlier call", "\nf(2)", []string{"Error: boom 2", "at f (line 3, column 9 of an earlier call)", "at line 2, column 1"}},
		{"a package's frame", `import ms from "ms"; ms({} as any)`, []string{"node_modules/ms", "at line 1, column 22"}},
		{"syntax", "let q = 1;\nq +* 2", []string{"SyntaxError: Unexpected token", "at line 2, column 4", "2 | q +* 2"}},
		{"export", "const e = 1;\nexport default e", []string{"export is not supported", "at line 2, column 1"}},
		{"unhandled rejection", `Promise.reject(new Error("later")); 5`, []string{"Unhandled promise rejection: Error: later", "at line 1, column 16"}},
		{"a callback's throw", "setTimeout(() => { throw new Error(\"tt\") }, 0);\nawait new Promise((r) => setTimeout(r, 50));",
			[]string{"Uncaught error in a callback: Error: tt", "line 1, column 26"}},
		{"host", `await fetch("https://api.other.test/")`, []string{`"api.other.test" is not in this sandbox's hosts; code can reach only: api.example.test`}},
		{"environment", `Deno.env.get("HOME")`, []string{`"HOME" is not available; code sees only the packages' secrets: CODERUN_TEST_TOKEN`}},
		{"not a package", `import x from "left-pad"`, []string{`"left-pad" is not one of this sandbox's packages (is-odd, is-number, ms, @types/ms)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, s, tt.code)
			if res.Success {
				t.Fatalf("RunCode(%q) succeeded: %+v", tt.code, res)
			}
			for _, w := range tt.want {
				if !strings.Contains(res.Error, w) {
					t.Errorf("RunCode(%q).Error = %q, want it to contain %q", tt.code, res.Error, w)
				}
			}
			for _, bad := range []string{"repl.js", "--allow-", "ext:", "<anonymous>", "deno add"} {
				if strings.Contains(res.Error, bad) {
					t.Errorf("RunCode(%q).Error = %q shows %q", tt.code, res.Error, bad)
				}
			}
		})
	}
	if res := run(t, s, "a + 1"); !res.Success || string(res.Result) != "2" {
		t.Errorf("after the errors: %+v, want 2 (the REPL kept its variables)", res)
	}
}

// A module under /workspace imports a configured package by its bare name, and an
// edited module is read again on the next import.
func TestWorkspaceModulesImportPackages(t *testing.T) {
	r, _ := newRunner(t, msConfig(t, ""), Options{ReapEvery: -1})
	s := session(t, r, "modules")
	write := func(name, src string) {
		t.Helper()
		code := fmt.Sprintf("await Deno.mkdir(\"/workspace/lib\", {recursive: true}); await Deno.writeTextFile(%q, %q); 1", name, src)
		if res := run(t, s, code); !res.Success {
			t.Fatalf("write %s: %+v", name, res)
		}
	}
	write("/workspace/lib/q.ts", "import ms from \"ms\";\nexport const q = (): number => ms(\"2s\");\n")
	steps := []struct{ code, want string }{
		{`import { q } from "./lib/q.ts"; q()`, "2000"},
		{`(await import("/workspace/lib/q.ts")).q()`, "2000"},
	}
	for _, st := range steps {
		if res := run(t, s, st.code); !res.Success || string(res.Result) != st.want {
			t.Errorf("RunCode(%q) = %+v (result %s), want %s", st.code, res, res.Result, st.want)
		}
	}
	write("/workspace/lib/q.ts", "import ms from \"ms\";\nimport isOdd from \"is-odd\";\nexport const q = (): number => ms(\"3s\") + (isOdd(1) ? 1 : 0);\n")
	for _, code := range []string{`import { q } from "./lib/q.ts"; q()`, `(await import("./lib/q.ts")).q()`} {
		if res := run(t, s, code); !res.Success || string(res.Result) != "3001" {
			t.Errorf("after the edit, RunCode(%q) = %+v (result %s), want 3001", code, res, res.Result)
		}
	}
	// An error inside a module names the module's file and line.
	write("/workspace/lib/bad.ts", "export function bad() {\n  throw new Error(\"in module\");\n}\n")
	res := run(t, s, `import { bad } from "./lib/bad.ts"; bad()`)
	if res.Success || !strings.Contains(res.Error, "/workspace/lib/bad.ts:2:9") || strings.Contains(res.Error, "?v=") {
		t.Errorf("error in a module = %q, want /workspace/lib/bad.ts:2:9", res.Error)
	}
}

// responseLimit is what the whole answer of one call must stay under with the default
// budget (stdout and result within 16 KiB of JSON, twice over: content and structured
// content).
const responseLimit = 40_000

// 10 MB of stdout comes back as a head and a tail under the limit, with its size and
// where the whole is; a 20 MB result does not cost the session its variables; results
// are compact JSON that says what JavaScript values were.
func TestOutputBudget(t *testing.T) {
	r, _ := newRunner(t, msConfig(t, ""), Options{ReapEvery: -1})
	s := session(t, r, "budget")
	res := run(t, s, `console.log("x".repeat(10 * 1024 * 1024)); 1`)
	b, _ := json.Marshal(res)
	if !res.Success || len(b) >= responseLimit/2 || res.Truncated == nil || res.Truncated.StdoutBytes != 10<<20+1 ||
		!strings.Contains(res.Stdout, "of 10,485,761 bytes left out here") {
		t.Fatalf("10 MB of stdout: %d bytes of JSON, truncated %+v, stdout %.200q…", len(b), res.Truncated, res.Stdout)
	}
	file := res.Truncated.StdoutFile
	if !strings.HasPrefix(file, rules.CoderunOutputDir+"/") {
		t.Errorf("stdout file = %q, want one under %s", file, rules.CoderunOutputDir)
	}
	if res := run(t, s, fmt.Sprintf("[Deno.statSync(%q).size, $stdout.length]", file)); string(res.Result) != "[10485761,10485761]" {
		t.Errorf("the whole stdout: %+v (result %s), want it in the file and $stdout", res, res.Result)
	}
	st, _ := s.state()
	res = run(t, s, `const keep = 41; "y".repeat(20 * 1024 * 1024)`)
	b, _ = json.Marshal(res)
	if !res.Success || res.Result != nil || len(b) >= responseLimit/2 || res.Truncated == nil || res.Truncated.ResultBytes != 20<<20+2 ||
		!strings.Contains(res.Truncated.ResultPreview, "of 20,971,522 bytes left out here") || res.Truncated.ResultFile == "" {
		t.Fatalf("20 MB result: %d bytes of JSON, truncated %+v", len(b), res.Truncated)
	}
	if res := run(t, s, "[keep + 1, $result.length]"); string(res.Result) != "[42,20971520]" {
		t.Errorf("after the 20 MB result: %+v (result %s), want the variables kept", res, res.Result)
	}
	if st2, _ := s.state(); st2.Pid != st.Pid {
		t.Errorf("the REPL was restarted (pid %d, then %d)", st.Pid, st2.Pid)
	}
	values := []struct{ code, want string }{
		{`new Map([["a", 1], ["b", new Set([2])]])`, `{"$map":[["a",1],["b",{"$set":[2]}]]}`},
		{`new Date(0)`, `"1970-01-01T00:00:00.000Z"`},
		{`new Uint8Array([1, 2])`, `{"$Uint8Array":[1,2]}`},
		{`[10n, NaN, -Infinity, undefined, null]`, `["10n","NaN","-Infinity",null,null]`},
		{`({a: 1, b: [1, 2], c: undefined, d: "x"})`, `{"a":1,"b":[1,2],"d":"x"}`},
		{`const o: any = {}; o.self = o; o`, `{"self":"[Circular]"}`},
		{`new RangeError("r")`, `{"$error":"RangeError: r\n    at line 1, column 1\n  1 | new RangeError(\"r\")"}`},
	}
	for _, v := range values {
		if res := run(t, s, v.code); !res.Success || string(res.Result) != v.want {
			t.Errorf("RunCode(%q) = %+v (result %s), want %s", v.code, res, res.Result, v.want)
		}
	}
}

// A smaller budget cuts smaller; stdout and the result share it.
func TestOutputBudgetConfigured(t *testing.T) {
	r, _ := newRunner(t, msConfig(t, "output_budget_kb = 2\n"), Options{ReapEvery: -1})
	s := session(t, r, "budget-small")
	res := run(t, s, `console.log("<".repeat(5000)); "w".repeat(5000)`)
	b, _ := json.Marshal(res)
	if !res.Success || len(b) > 2*1024+600 || res.Truncated == nil || res.Truncated.StdoutBytes != 5001 || res.Truncated.ResultBytes != 5002 {
		t.Errorf("over a 2 KiB budget: %d bytes: %s", len(b), b)
	}
}

// reset starts a fresh REPL; a timeout returns what the code printed before it, whether
// the code was waiting or spinning.
func TestResetAndTimeoutStdout(t *testing.T) {
	c := msConfig(t, "")
	c.Timeout = 3 * time.Second
	r, _ := newRunner(t, c, Options{ReapEvery: -1})
	s := session(t, r, "reset")
	if res := run(t, s, "const z = 1; z"); string(res.Result) != "1" {
		t.Fatalf("z = %+v", res)
	}
	res, err := s.Run(t.Context(), RunRequest{Code: "typeof z", Reset: true})
	if err != nil || !res.Success || string(res.Result) != `"undefined"` {
		t.Errorf("after reset: %+v %v, want z gone", res, err)
	}
	for _, code := range []string{
		`console.log("before"); await new Promise((r) => setTimeout(r, 60_000))`,
		`console.log("before"); while (true) {}`,
	} {
		res := run(t, s, code)
		if res.Success || !strings.Contains(res.Error, "timed out after 3s") || !strings.Contains(res.Stdout, "before\n") {
			t.Errorf("RunCode(%q) = %+v, want a timeout with the stdout printed before it", code, res)
		}
	}
	if res := run(t, s, "1 + 1"); string(res.Result) != "2" {
		t.Errorf("after the timeouts: %+v", res)
	}
}

// Type-checking runs deno check against the packages' types; its diagnostics name the
// snippet's line, globals of earlier calls are known, and a snippet with errors does
// not run.
func TestTypecheck(t *testing.T) {
	r, _ := newRunner(t, msConfig(t, "typecheck = true\n"), Options{ReapEvery: -1})
	s := session(t, r, "typecheck")
	off := false
	if res, err := s.Run(t.Context(), RunRequest{Code: "const k = 5; let ran = 0; k", Typecheck: &off}); err != nil || string(res.Result) != "5" {
		t.Fatalf("unchecked: %+v %v", res, err)
	}
	res := run(t, s, "ran = 1;\nconst n: number = \"a\";\nn")
	if res.Success || !strings.Contains(res.Error, "TS2322") || !strings.Contains(res.Error, "line 2, column 7") || strings.Contains(res.Error, ".check-") {
		t.Errorf("a type error = %+v, want TS2322 at line 2, column 7", res)
	}
	if res := run(t, s, "import ms from \"ms\";\nconst m: number = k + Number(ms(\"1s\"));\n[m, ran]"); !res.Success || string(res.Result) != "[1005,0]" {
		t.Errorf("a snippet that checks = %+v (result %s), want [1005,0]: earlier globals known, the failed snippet not run", res, res.Result)
	}
}

// Through MCP, run_code that throws is isError with the RunResult as structured
// content; stdout streams as progress notifications; reset works; the answer to 10 MB of
// stdout stays under the limit.
func TestMCPRunCode(t *testing.T) {
	r, _ := newRunner(t, msConfig(t, ""), Options{ReapEvery: -1})
	var mu sync.Mutex
	var progress []string
	cs, end := connectWith(t, r, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, req.Params.Message)
		mu.Unlock()
	}})
	defer end()
	call := func(args map[string]any, token any) (*mcp.CallToolResult, RunResult) {
		t.Helper()
		p := &mcp.CallToolParams{Name: "run_code", Arguments: args}
		if token != nil {
			p.SetProgressToken(token)
		}
		res, err := cs.CallTool(t.Context(), p)
		if err != nil {
			t.Fatalf("run_code %v: %v", args, err)
		}
		var rr RunResult
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &rr); err != nil {
			t.Fatalf("structured content %s: %v", b, err)
		}
		return res, rr
	}
	res, rr := call(map[string]any{"code": "const v = 1;\nthrow new Error(\"x\")"}, nil)
	if !res.IsError || rr.Success || !strings.Contains(rr.Error, "at line 2, column 7") {
		t.Errorf("throw: isError %v, structured %+v", res.IsError, rr)
	}
	res, rr = call(map[string]any{"code": "for (let i = 0; i < 3; i++) { console.log(\"tick\", i); await new Promise((r) => setTimeout(r, 30)); }\nv + 6"}, "tok-1")
	if res.IsError || string(rr.Result) != "7" || rr.Stdout != "tick 0\ntick 1\ntick 2\n" {
		t.Errorf("streaming call: isError %v, %+v", res.IsError, rr)
	}
	mu.Lock()
	got := strings.Join(progress, "")
	mu.Unlock()
	if !strings.Contains(got, "tick 0\n") {
		t.Errorf("progress notifications %q, want the stdout", got)
	}
	if _, rr := call(map[string]any{"code": "typeof v", "reset": true}, nil); string(rr.Result) != `"undefined"` {
		t.Errorf("reset: %+v", rr)
	}
	res, rr = call(map[string]any{"code": `console.log("x".repeat(10 * 1024 * 1024))`}, nil)
	b, _ := json.Marshal(res)
	if len(b) >= responseLimit || rr.Truncated == nil || rr.Truncated.StdoutBytes != 10<<20+1 {
		t.Errorf("10 MB of stdout through MCP: %d bytes, truncated %+v", len(b), rr.Truncated)
	}
}

// BenchmarkTypecheck is run_code of a 50-line snippet with type-checking on: deno
// check in the sandbox, then the run.
func BenchmarkTypecheck(b *testing.B) {
	r, _ := newRunner(b, msConfig(b, "typecheck = true\n"), Options{ReapEvery: -1})
	s := session(b, r, "bench-typecheck")
	var src strings.Builder
	src.WriteString("import ms from \"ms\";\ninterface Row { id: number; name: string; took: number }\nconst rows: Row[] = [];\n")
	for i := 0; len(strings.Split(src.String(), "\n")) < 49; i++ {
		fmt.Fprintf(&src, "rows.push({ id: %d, name: \"row-%d\", took: Number(ms(\"%ds\")) });\n", i, i, i+1)
	}
	src.WriteString("rows.reduce((n: number, r: Row) => n + r.took, 0)")
	code := src.String()
	ctx := context.Background()
	if res, err := s.RunCode(ctx, code, "warm up"); err != nil || !res.Success {
		b.Fatal(res, err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := s.RunCode(ctx, code, "bench")
		lat = append(lat, time.Since(start))
		if err != nil || !res.Success {
			b.Fatal(res, err)
		}
	}
	p50(b, lat)
}
