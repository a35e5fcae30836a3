package provider_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// The boot plan of a fresh sandbox with one repo: blocking steps first, background
// steps after, every command built with ShellEscape.
func ExampleBuildPlan() {
	plan, err := provider.BuildPlan(provider.CreateOptions{
		SessionID: "s1",
		Repos:     []provider.RepoSpec{{RepoURL: "https://github.com/acme/app", Token: "tok", WorkspacePath: "."}},
		Branch:    "main",
		EnvVars:   map[string]string{"ANTHROPIC_API_KEY": "key", "SANDBOX_MCP_AUTH_TOKEN": "t"},
	}, provider.PlanConfig{Kind: provider.KindE2B, Now: time.Unix(1700000000, 0)})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Blocking[:3] {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s: %s%s", s.Kind, s.Name, s.Path, s.Command)))
		if s.Git != nil {
			fmt.Printf("  from the host: %s branch %s into %s\n", s.Git.RepoURL, s.Git.Branch, s.Git.Target)
		}
	}
	fmt.Println("background:", len(plan.Background), "steps, repo dir", plan.RepoDir)
	// Output:
	// mkdir workspace: /home/user/workspace
	// git-bundle clone .:
	//   from the host: https://github.com/acme/app branch main into /home/user/workspace
	// write metadata: /home/user/.proliferate/metadata.json
	// background: 8 steps, repo dir /home/user/workspace
}

// Secrets never reach a log: RedactSecrets runs on every provider error message.
func ExampleRedactSecrets() {
	fmt.Println(provider.RedactSecrets("clone https://x-access-token:ghs_abc@github.com/acme/app failed"))
	fmt.Println(provider.FromError(fmt.Errorf("connect ECONNREFUSED"), provider.KindE2B, provider.OpHealth).Retryable)
	// Output:
	// clone https://[REDACTED]github.com/acme/app failed
	// true
}
