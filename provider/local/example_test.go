package local_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// Boot a sandbox on this machine from a real git repo with the one provider over the
// local engine: the repo is cloned into the
// sandbox's workspace and its sandbox-mcp answers on a loopback port. Programs that
// are not installed, or that would bind fixed ports, are skipped and reported.
func Example() {
	ctx := context.Background()
	tmp, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(tmp)

	// A repo to clone.
	origin := filepath.Join(tmp, "origin")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", origin},
		{"-C", origin, "-c", "user.name=e", "-c", "user.email=e@x", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			fmt.Println(err, string(out))
			return
		}
	}

	// The local engine, and the one provider over it.
	eng, err := local.NewEngine(local.EngineOptions{DataDir: filepath.Join(tmp, "root"), SandboxMCP: local.BuiltSandboxMCP()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	p, err := provider.New(eng, provider.Options{Kind: provider.KindLocal})
	if err != nil {
		fmt.Println(err)
		return
	}

	b, err := p.Boot(ctx, provider.CreateOptions{
		SessionID: "example",
		Repos:     []provider.RepoSpec{{RepoURL: "file://" + origin, WorkspacePath: "app"}},
		Branch:    "main",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Terminate(ctx, "example", b.SandboxID)

	_, err = os.Stat(filepath.Join(b.Info.Home, "workspace/app/.git"))
	fmt.Println("cloned:", err == nil)
	resp, err := http.Get(b.SandboxMCPURL + "/api/health")
	if err == nil {
		resp.Body.Close()
		fmt.Println("sandbox-mcp health:", resp.StatusCode)
	}
	for _, r := range b.Report {
		switch r.Name {
		case "clone app", "start sandbox-mcp", "start opencode":
			fmt.Printf("%s: %s\n", r.Name, r.Status)
		}
	}
	fmt.Println("terminate:", p.Terminate(ctx, "example", b.SandboxID))
	fmt.Println("terminate again:", p.Terminate(ctx, "example", b.SandboxID))
	// Output:
	// cloned: true
	// sandbox-mcp health: 200
	// clone app: ok
	// start opencode: skipped
	// start sandbox-mcp: ok
	// terminate: <nil>
	// terminate again: <nil>
}
