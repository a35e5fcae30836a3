package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakePlugin stands in for @opencode-ai/plugin: tool() returns its definition and
// tool.schema is a chainable zod look-alike.
const fakePlugin = `
const chain = () => new Proxy(function () {}, { get: () => chain, apply: () => chain() });
export const tool = (def) => def;
tool.schema = chain();
`

const toolDriver = `
const results = {};
for (const name of process.argv.slice(2)) {
  const t = (await import("./" + name + ".mjs")).default;
  if (typeof t.description !== "string" || !t.args || typeof t.execute !== "function") {
    throw new Error(name + ": not a tool definition");
  }
  results[name] = await t.execute({ folder: "x's" }, { callID: "call-" + name });
}
console.log(JSON.stringify(results));
`

// Every tool source runs in Node against a fake gateway: the request path, token and
// body are right, and a dropped connection is retried with the same tool_call_id.
func TestToolSourcesRunInNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	type call struct {
		Path, Auth string
		Body       map[string]any
	}
	var mu sync.Mutex
	var calls []call
	dropped := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		json.Unmarshal(b, &body)
		mu.Lock()
		calls = append(calls, call{r.URL.Path, r.Header.Get("Authorization"), body})
		drop := strings.HasSuffix(r.URL.Path, "/verify") && !dropped
		dropped = dropped || drop
		mu.Unlock()
		if drop {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"result": "done " + body["tool_call_id"].(string)})
	}))
	defer srv.Close()

	dir := t.TempDir()
	plugin := filepath.Join(dir, "node_modules", "@opencode-ai", "plugin")
	os.MkdirAll(plugin, 0o755)
	os.WriteFile(filepath.Join(plugin, "package.json"), []byte(`{"name":"@opencode-ai/plugin","type":"module","main":"index.mjs"}`), 0o644)
	os.WriteFile(filepath.Join(plugin, "index.mjs"), []byte(fakePlugin), 0o644)
	os.WriteFile(filepath.Join(dir, "driver.mjs"), []byte(toolDriver), 0o644)
	var names []string
	for _, tl := range Tools() {
		names = append(names, tl.Name)
		os.WriteFile(filepath.Join(dir, tl.Name+".mjs"), []byte(ToolSource(tl)), 0o644)
	}
	cmd := exec.Command(node, append([]string{"driver.mjs"}, names...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROLIFERATE_GATEWAY_URL="+srv.URL+"/", "PROLIFERATE_SESSION_ID=sess 1", "SANDBOX_MCP_AUTH_TOKEN=tok")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var results map[string]string
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	for _, n := range names {
		if want := "done call-" + n; results[n] != want {
			t.Errorf("%s returned %q, want %q", n, results[n], want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != len(names)+1 {
		t.Fatalf("gateway got %d calls, want %d (one retry)", len(calls), len(names)+1)
	}
	first, retry := calls[0], calls[1]
	want := call{"/proliferate/sess 1/tools/verify", "Bearer tok", map[string]any{"tool_call_id": "call-verify", "args": map[string]any{"folder": "x's"}}}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("first call mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(first, retry); diff != "" {
		t.Errorf("retry differs from the first call (-first +retry):\n%s", diff)
	}
}
