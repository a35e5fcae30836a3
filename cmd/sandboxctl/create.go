package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// CreateOptions are the inputs of create, validated.
type CreateOptions struct {
	Ctx     context.Context
	Factory *Factory
	// Repos are the --repo values, URL[#branch].
	Repos    []string
	TokenEnv string
	Snapshot string
	Session  string
	Env      map[string]string
	// Spec holds --image, --runtime, the limits, the volumes and the secrets.
	Spec engine.Spec
	// LLMKeysInSandbox is --llm-keys-in-sandbox (provider.Options.LLMKeysInSandbox).
	LLMKeysInSandbox bool
	// Bastion is --bastion: the session is a pair (bastion.go).
	Bastion          bool
	PlatformTokenEnv string
}

// createFlags are create's flags as typed.
type createFlags struct {
	envs, volumes           []string
	memory, disk, cpus      string
	pids                    int64
	image, runtime, session string
	snapshot, tokenEnv      string
	repos, secrets          []string
	llmKeysInSandbox        bool
	bastion                 bool
	platformTokenEnv        string
}

// NewCmdCreate builds `create`.
func NewCmdCreate(f *Factory, runF func(*CreateOptions) error) *cobra.Command {
	var fl createFlags
	cmd := &cobra.Command{
		Use:   "create [--repo URL[#branch]]... [--env K=V]... [--image REF] [--memory SIZE] [--cpus N] [--volume NAME:/path[:ro]]...",
		Short: "Create a sandbox and boot it with the platform's boot plan",
		Example: "  ID=$(sandboxctl create --repo https://github.com/org/web.git#main)\n" +
			"  sandboxctl create --image sandbox --memory 2G --cpus 2 --volume data:/home/user/data\n" +
			"  sandboxctl -p modal create --env NODE_ENV=development",
		Long: "Create a sandbox: clone the repos, write the boot plan's files, start sandbox-mcp\n" +
			"(and OpenCode and Caddy when installed), and print its id and URLs. Progress goes\n" +
			"to stderr. Sizes take K, M, G or T (binary multiples). A provider that cannot\n" +
			"honour --image, --runtime, --volume or a limit refuses the create, naming the\n" +
			"flag. A --repo URL#branch whose branch does not exist fails the create. The\n" +
			"sandbox's own commands (exec, terminal) reach its sidecar with its token;\n" +
			"`sandboxctl url ID` prints both.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := fl.options(cmd)
			if err != nil {
				return usageError{err}
			}
			o.Ctx, o.Factory, o.LLMKeysInSandbox = cmd.Context(), f, fl.llmKeysInSandbox
			if o.Spec.Secrets, err = parseSecrets(fl.secrets, f.getenv); err != nil {
				return usageError{err}
			}
			return runOr(o, runF, createRun)
		},
	}
	s := cmd.Flags()
	s.StringArrayVar(&fl.repos, "repo", nil, "git repository to clone, URL[#branch] (repeatable)")
	s.StringVar(&fl.snapshot, "snapshot", "", "start from this snapshot")
	s.StringArrayVar(&fl.envs, "env", nil, "environment variable KEY=VALUE for the sandbox (repeatable)")
	s.StringVar(&fl.session, "session", "", "session id (default: generated)")
	s.StringVar(&fl.tokenEnv, "token-env", "", "environment variable holding the git token of the --repo URLs (used on the host only)")
	s.StringVar(&fl.image, "image", "", "`REF|ID` of the image to boot from, a name or an id (default: the engine's)")
	s.StringVar(&fl.runtime, "runtime", "", "isolation runtime `NAME` (default: the engine's)")
	s.StringVar(&fl.memory, "memory", "", "memory limit, a `SIZE` such as 512M or 2G")
	s.StringVar(&fl.disk, "disk", "", "`SIZE` limit of what the sandbox writes to its filesystem, e.g. 2G")
	s.StringVar(&fl.cpus, "cpus", "", "CPU limit, a number of `CPUS` such as 1.5")
	s.Int64Var(&fl.pids, "pids", 0, "limit of processes and threads (`N`)")
	s.StringArrayVar(&fl.volumes, "volume", nil, "named volume to mount, `NAME:/path[:ro]` (repeatable)")
	s.StringArrayVar(&fl.secrets, "secret", nil, "secret the sandbox never holds, `NAME:HOSTS` (host[,host]…): the value of the host's $NAME, sent to those hosts only (repeatable)")
	s.BoolVar(&fl.llmKeysInSandbox, "llm-keys-in-sandbox", false, "give the boot's LLM keys to the sandbox in its environment, where everything it runs can read and send them anywhere; without it they are secrets its egress proxy adds on the way to their API hosts, and a provider that cannot do that (modal or e2b without an egress gateway) refuses the create")
	s.BoolVar(&fl.bastion, "bastion", false, "make a bastion session: an agent sandbox with no credential and no tunnel, beside a controller that is its only ingress and runs its git (the local provider, and modal or e2b served by sandboxctl serve)")
	s.StringVar(&fl.platformTokenEnv, "platform-token-env", "", "with --bastion, environment variable holding the token the controller's ingress asks for (default: generated and printed)")
	return cmd
}

// options validates the flags.
func (fl *createFlags) options(cmd *cobra.Command) (*CreateOptions, error) {
	o := &CreateOptions{Repos: fl.repos, TokenEnv: fl.tokenEnv, Snapshot: fl.snapshot, Session: fl.session,
		Env: map[string]string{}, Spec: engine.Spec{Image: fl.image, Runtime: fl.runtime}, Bastion: fl.bastion, PlatformTokenEnv: fl.platformTokenEnv}
	if fl.platformTokenEnv != "" && !fl.bastion {
		return nil, fmt.Errorf("--platform-token-env needs --bastion")
	}
	for _, kv := range fl.envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		o.Env[k] = v
	}
	var err error
	if fl.memory != "" {
		if o.Spec.Limits.MemoryBytes, err = parseSize(fl.memory); err != nil {
			return nil, fmt.Errorf("--memory: %w", err)
		}
	}
	if fl.disk != "" {
		if o.Spec.Limits.DiskBytes, err = parseSize(fl.disk); err != nil {
			return nil, fmt.Errorf("--disk: %w", err)
		}
	}
	if fl.cpus != "" {
		if o.Spec.Limits.CPUMillis, err = parseCPUs(fl.cpus); err != nil {
			return nil, fmt.Errorf("--cpus: %w", err)
		}
	}
	if cmd.Flags().Changed("pids") && fl.pids <= 0 {
		return nil, fmt.Errorf("--pids %d: want a positive number", fl.pids)
	}
	o.Spec.Limits.Pids = fl.pids
	for _, v := range fl.volumes {
		m, err := parseVolume(v)
		if err != nil {
			return nil, fmt.Errorf("--volume: %w", err)
		}
		o.Spec.Volumes = append(o.Spec.Volumes, m)
	}
	return o, nil
}

func createRun(o *CreateOptions) error {
	f := o.Factory
	token, err := gitToken(f, o.TokenEnv)
	if err != nil {
		return err
	}
	b, err := f.openWith(o.Ctx, "", func(bo *backendOptions) { bo.LLMKeysInSandbox = o.LLMKeysInSandbox })
	if err != nil {
		return err
	}
	defer b.close()
	// Refused before anything is made: what the engine says it cannot do.
	if err := provider.CheckSpec(b.Engine.Capabilities(), bindsHostPaths(b.Engine), o.Spec); err != nil {
		return refusal(f.provider, o.Spec, err)
	}
	// A snapshot asked for by id must be used: no quiet fresh sandbox instead.
	opts := provider.CreateOptions{SessionID: o.Session, SnapshotID: o.Snapshot, SnapshotRequired: o.Snapshot != "", EnvVars: o.Env,
		Spec: o.Spec}
	if opts.SessionID == "" {
		opts.SessionID = "sandboxctl-" + time.Now().UTC().Format("20060102-150405")
	}
	for i, r := range o.Repos {
		url, branch, _ := strings.Cut(r, "#")
		name := strings.TrimSuffix(path.Base(strings.TrimRight(url, "/")), ".git")
		if name == "" || name == "." || name == "/" {
			name = "repo" + strconv.Itoa(i+1)
		}
		// A branch asked for by name must exist: no quiet fall-back to the default one.
		opts.Repos = append(opts.Repos, provider.RepoSpec{RepoURL: url, Token: token, Branch: branch, BranchRequired: branch != "",
			WorkspacePath: name})
	}
	if o.Bastion {
		return createBastionRun(o, b, opts)
	}
	start := time.Now()
	res, err := b.Provider.CreateSandbox(o.Ctx, opts)
	if err != nil && !o.LLMKeysInSandbox && errors.Is(err, provider.ErrLLMKeysRefused) {
		return fmt.Errorf("%w\nthe sandbox was not created: give modal or e2b an egress gateway (sandboxctl gateway), or pass --llm-keys-in-sandbox to accept the LLM keys inside the sandbox", err)
	}
	if err != nil {
		return refusal(f.provider, o.Spec, err)
	}
	f.progress("created %s in %v", res.SandboxID, time.Since(start).Round(time.Millisecond))
	if err := writeGitRecord(f.dataDir, res.SandboxID, opts.Repos); err != nil {
		f.progress("warning: %v (push and sync will need --remote)", err)
	}
	if f.json {
		return f.printJSON(res)
	}
	return printCreated(f.stdout, res)
}

// bindsHostPaths reports whether eng binds host paths (engine.HostBinder).
func bindsHostPaths(eng engine.Engine) bool {
	hb, ok := eng.(engine.HostBinder)
	return ok && hb.BindsHostPaths()
}

func printCreated(w io.Writer, res provider.CreateResult) error {
	fmt.Fprintln(w, res.SandboxID)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{{"sandbox-mcp", res.SandboxMCPURL}, {"opencode", res.TunnelURL}, {"preview", res.PreviewURL}} {
		if kv[1] != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", kv[0], kv[1])
		}
	}
	return tw.Flush()
}

// refusal says plainly that provider name refused a flag it cannot honour, and
// names the flags of spec the refusal is about.
func refusal(name string, spec engine.Spec, err error) error {
	if errors.Is(err, engine.ErrNotFound) && len(spec.Volumes) > 0 && strings.Contains(err.Error(), "volume") {
		return fmt.Errorf("%w\ncreate the volume first: sandboxctl volume create NAME", err)
	}
	if !errors.Is(err, engine.ErrLimit) && !errors.Is(err, engine.ErrUnsupported) {
		return err
	}
	msg := strings.ToLower(err.Error())
	var flags []string
	for _, x := range []struct {
		flag, word string
		set        bool
	}{
		{"--memory", "memory", spec.Limits.MemoryBytes != 0}, {"--cpus", "cpu", spec.Limits.CPUMillis != 0},
		{"--pids", "pids", spec.Limits.Pids != 0}, {"--disk", "disk", spec.Limits.DiskBytes != 0},
		{"--volume", "volume", len(spec.Volumes) > 0}, {"--image", "image", spec.Image != ""},
		{"--runtime", "runtime", spec.Runtime != ""},
	} {
		if x.set && strings.Contains(msg, x.word) {
			flags = append(flags, x.flag)
		}
	}
	which := "the flag"
	if len(flags) > 0 {
		which = strings.Join(flags, ", ")
	}
	return fmt.Errorf("provider %s refuses %s: %w\nthe sandbox was not created: drop or change %s", name, which, err, which)
}
