package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// URLOptions are the inputs of url.
type URLOptions struct {
	Ctx     context.Context
	Factory *Factory
	ID      string
}

// sidecarAccess is what url prints: where a sandbox's sidecar answers and its token.
type sidecarAccess struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// NewCmdURL builds `url`.
func NewCmdURL(f *Factory, runF func(*URLOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "url ID",
		Short: "Print a sandbox's sidecar URL and its auth token",
		Long: "Print where a sandbox's sidecar (sandbox-mcp) answers on this machine and the token\n" +
			"it takes, as shell exports that the proliferate CLI and curl use. The token is read\n" +
			"from the sandbox itself, so this works for whoever can drive its engine (for the\n" +
			"local engine: the user who owns the data dir). Treat the output as a secret.",
		Example: "  eval \"$(sandboxctl url ID)\"\n" +
			"  curl -H \"Authorization: Bearer $SANDBOX_MCP_AUTH_TOKEN\" \"$PROLIFERATE_SANDBOX_MCP_URL/api/services\"\n" +
			"  sandboxctl --json url ID",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &URLOptions{Ctx: cmd.Context(), Factory: f, ID: args[0]}
			return runOr(o, runF, urlRun)
		},
	}
}

func urlRun(o *URLOptions) error {
	f := o.Factory
	b, err := f.open(o.Ctx, "")
	if err != nil {
		return err
	}
	defer b.close()
	u, tok, err := b.Sidecar(o.Ctx, o.ID)
	if err != nil {
		return fmt.Errorf("find the sidecar of sandbox %s: %w", o.ID, err)
	}
	if f.json {
		return f.printJSON(sidecarAccess{URL: u, Token: tok})
	}
	_, err = fmt.Fprintf(f.stdout, "export %s=%s\nexport %s=%s\n", rules.EnvSidecarURL, shellQuote(u), rules.EnvAuthToken, shellQuote(tok))
	return err
}
