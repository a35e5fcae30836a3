package main

// Bastion sessions (model C, docs/bastion.md) in the CLI: create --bastion
// makes the pair, list shows each sandbox's role and session, and exec and cp
// given a session id go to its agent sandbox.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// listEntry is one sandbox of list --json: the engine's Info with the role
// and session of a bastion pair spelled out.
type listEntry struct {
	engine.Info
	Role    string `json:"role,omitempty"`
	Session string `json:"session,omitempty"`
}

// listEntries adds the roles to list, reading the labels an engine's List
// leaves out.
func listEntries(ctx context.Context, eng engine.Engine, list []engine.Info) []listEntry {
	out := make([]listEntry, 0, len(list))
	for _, in := range list {
		if in.Labels == nil {
			if full, err := eng.Get(ctx, in.ID); err == nil {
				in.Labels = full.Labels
			}
		}
		e := listEntry{Info: in}
		if e.Role = in.Labels[rules.LabelRole]; e.Role != "" {
			e.Session = in.Labels[rules.LabelSession]
		}
		out = append(out, e)
	}
	return out
}

// resolveSandbox is id when a sandbox has it, else the agent sandbox of the
// bastion session id, else id (for the engine to refuse as not found).
func resolveSandbox(ctx context.Context, eng engine.Engine, id string) string {
	if _, err := eng.Get(ctx, id); err == nil || !errors.Is(err, engine.ErrNotFound) {
		return id
	}
	list, err := eng.List(ctx)
	if err != nil {
		return id
	}
	for _, e := range listEntries(ctx, eng, list) {
		if e.Role == rules.RoleAgent && e.Session == id && e.State != engine.StateDead {
			return e.ID
		}
	}
	return id
}

// createBastionRun is create --bastion: the pair, its repository cloned by the
// controller.
func createBastionRun(o *CreateOptions, b openedBackend, opts provider.CreateOptions) error {
	f := o.Factory
	bo := provider.BastionOptions{}
	if o.PlatformTokenEnv != "" {
		if bo.PlatformToken = f.getenv(o.PlatformTokenEnv); bo.PlatformToken == "" {
			return usageError{fmt.Errorf("--platform-token-env %s: the variable is empty on the host", o.PlatformTokenEnv)}
		}
	} else {
		buf := make([]byte, 24)
		_, _ = rand.Read(buf)
		bo.PlatformToken = "bastion-" + hex.EncodeToString(buf)
	}
	switch {
	case len(opts.Repos) > 1:
		return usageError{errors.New("--bastion takes at most one --repo: the controller's git gate serves one repository")}
	case len(opts.Repos) == 1:
		if opts.Repos[0].Branch != "" {
			return usageError{errors.New("--bastion: --repo URL#branch is not supported yet; the controller clones the default branch")}
		}
		bo.RepoURL, bo.RepoToken = opts.Repos[0].RepoURL, opts.Repos[0].Token
		opts.Repos = nil
	}
	start := time.Now()
	res, err := b.Provider.CreateBastion(o.Ctx, opts, bo)
	if err != nil {
		if errors.Is(err, engine.ErrUnsupported) {
			return fmt.Errorf("provider %s refuses --bastion: %w\nthe session was not created: drop --bastion", f.provider, err)
		}
		return err
	}
	f.progress("created bastion session %s in %v", opts.SessionID, time.Since(start).Round(time.Millisecond))
	out := struct {
		provider.BastionResult
		Session string `json:"session"`
		// PlatformToken is printed only when sandboxctl made it: whoever
		// holds it opens the ingress.
		PlatformToken string `json:"platformToken,omitempty"`
	}{BastionResult: res, Session: opts.SessionID}
	if o.PlatformTokenEnv == "" {
		out.PlatformToken = bo.PlatformToken
	}
	if f.json {
		return f.printJSON(out)
	}
	return printBastion(f.stdout, out.BastionResult, opts.SessionID, out.PlatformToken)
}

func printBastion(w io.Writer, res provider.BastionResult, session, token string) error {
	fmt.Fprintln(w, res.AgentID)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{{"session", session}, {"controller", res.ControllerID}, {"ingress", res.IngressURL},
		{"platform token", token}, {"volume", res.Volume}} {
		if kv[1] != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", kv[0], kv[1])
		}
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "reach port N", strings.TrimSuffix(res.IngressURL, "/")+rules.BastionPortPrefix+"N/ with Authorization: Bearer <platform token>")
	return tw.Flush()
}

// pausePair pauses or resumes the whole bastion pair id belongs to; handled
// is false for a sandbox of no pair.
func pausePair(ctx context.Context, b openedBackend, id string, pause bool) (bool, error) {
	if b.Provider == nil {
		return false, nil
	}
	if pause {
		return b.Provider.PausePair(ctx, id)
	}
	return b.Provider.ResumePair(ctx, id)
}
