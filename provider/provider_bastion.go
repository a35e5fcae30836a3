package provider

// A bastion session (model C, docs/bastion.md): an agent sandbox with no
// credential and no published port, booted with the platform's plan, beside a
// controller sandbox that runs no agent code, holds the platform's token and
// the git token, and is the only way in (its ingress, the pair's one tunnel)
// and the only git that reaches the remote (its gate). Both mount the same
// workspace volume; the link between them is the agent's relay and the
// controller's gate on unix sockets of that volume (package link).

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// BastionOptions are what a bastion session adds to a create.
type BastionOptions struct {
	// PlatformToken is what the controller's ingress asks of every request;
	// required. It is in the controller's environment only.
	PlatformToken string
	// RepoURL, when set, is the http(s) repository the controller clones
	// (work tree on the shared volume, git directory on its own disk) and
	// its git gate pushes to (session/<id> only) and fetches from.
	RepoURL string
	// RepoToken is the credential of RepoURL; it is in the controller's
	// environment only.
	RepoToken string
	// AgentPorts are the agent's ports the ingress opens; nil means the
	// sidecar, OpenCode and the preview.
	AgentPorts []int
	// Volume names the shared workspace volume; empty makes one named after
	// the session. It is kept when the pair ends.
	Volume string
}

// BastionResult is a bastion session that runs.
type BastionResult struct {
	// CreateResult is the agent's, its URLs those of the controller's
	// ingress (add the platform's token to every request).
	CreateResult
	AgentID      string `json:"agentId"`
	ControllerID string `json:"controllerId"`
	Volume       string `json:"volume"`
	// IngressURL is the controller's tunnel; /port/<n>/… reaches port n of
	// the agent.
	IngressURL string `json:"ingressUrl"`
	// SidecarToken authenticates calls to the agent's sidecar. It guards
	// nothing reachable from outside (the agent has no port); the provider
	// reaches the sidecar through the engine.
	SidecarToken string `json:"-"`
}

// dialHost is the host suffix of the URLs the provider reaches a bastion
// agent's ports at: no tunnel, a connection through the engine's DialPort.
const dialHost = ".engine-dial.invalid"

// dialURL is the URL of port of sandbox id through the engine.
func dialURL(id string, port int) string {
	return "http://" + net.JoinHostPort(id+dialHost, strconv.Itoa(port))
}

// publishedPorts are the ports a boot asks a tunnel for: none for a bastion
// agent.
func (p *Provider) publishedPorts() []int {
	if p.noPorts {
		return nil
	}
	if p.caps.SSH {
		return append(slices.Clip(bootPorts), PortSSH)
	}
	return bootPorts
}

// agentProvider is p for booting a bastion agent: no published port, its
// sidecar reached through the engine's DialPort.
func (p *Provider) agentProvider() *Provider {
	a := *p
	a.noPorts = true
	eng := p.eng
	a.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, ps, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			id, ok := strings.CutSuffix(host, dialHost)
			port, perr := strconv.Atoi(ps)
			if !ok || perr != nil {
				return nil, fmt.Errorf("dial %s: not a sandbox port reached through the engine", addr)
			}
			return eng.DialPort(ctx, id, port)
		}}}
	a.o.HTTPClient = a.hc
	a.o.ReadyWait = time.Millisecond // OpenCode's readiness is the platform's to see, through the ingress
	return &a
}

// SidecarClient is Sidecar with the HTTP client that reaches the URL. For a
// bastion agent, which has no port of its own, the URL is the engine's way in
// (DialPort) and only the client returned reaches it; for any other sandbox
// it is Sidecar's and the client is nil (the engine's port client, or any).
func (p *Provider) SidecarClient(ctx context.Context, sandboxID string) (url, token string, hc *http.Client, err error) {
	info, err := p.running(ctx, sandboxID)
	if err != nil {
		return "", "", nil, err
	}
	if info.Labels[rules.LabelRole] != rules.RoleAgent || !p.caps.DialPort {
		url, token, err = p.sidecarOf(ctx, sandboxID, info)
		return url, token, nil, err
	}
	if token, _, err = p.sidecarEnv(ctx, sandboxID); err != nil {
		return "", "", nil, err
	}
	// No overall timeout: the terminal's WebSocket lives as long as the user wants.
	return dialURL(sandboxID, PortSandboxMCP), token, &http.Client{Transport: p.agentProvider().hc.Transport}, nil
}

// BastionUnsupportedError refuses a bastion session on an engine that cannot
// link two sandboxes through a socket of a shared volume: it lacks volumes,
// detached processes, isolation or DialPort.
func BastionUnsupportedError(k Kind) *ProviderError {
	return NewProviderError(k, OpCreateSandbox, "bastion sessions need an isolating engine with volumes, detached processes and DialPort: "+string(k)+
		" as configured cannot link the agent and the controller through a shared volume (docs/bastion.md says what each engine offers); "+
		"create without the bastion option", false, engine.ErrUnsupported)
}

// CreateBastion makes the pair of a bastion session: the agent booted with
// opts (its repositories are the controller's business: opts.Repos must be
// empty; use b.RepoURL), then the controller, and returns once the agent's
// sidecar answers through the controller's ingress. A failure ends both, and
// removes the shared volume unless b.Volume named it.
func (p *Provider) CreateBastion(ctx context.Context, opts CreateOptions, b BastionOptions) (BastionResult, error) {
	fail := func(err error) (BastionResult, error) { return BastionResult{}, p.fail(OpCreateSandbox, err) }
	vols, ok := p.eng.(engine.Volumes)
	_, starts := p.eng.(engine.Starter)
	switch {
	case !ok || !starts || !p.caps.Isolated || !p.caps.DialPort || !p.caps.Volumes:
		return BastionResult{}, BastionUnsupportedError(p.o.Kind)
	case b.PlatformToken == "":
		return fail(errors.New("bastion: the platform token is required: the controller's ingress opens only with it"))
	case len(opts.Repos) > 0:
		return fail(errors.New("bastion: the controller clones the repository (BastionOptions.RepoURL); the agent gets none of its own"))
	case opts.SnapshotID != "" || opts.BaseSnapshotID != "":
		return fail(fmt.Errorf("bastion: restoring a pair from a snapshot: %w", engine.ErrUnsupported))
	case opts.SessionID == "":
		return fail(errors.New("bastion: sessionId is required"))
	}
	repo, err := bastionRepo(b.RepoURL, opts.SessionID)
	if err != nil {
		return fail(err)
	}
	if len(b.AgentPorts) == 0 {
		b.AgentPorts = []int{PortSandboxMCP, PortOpenCode, PortPreview}
	}
	madeVolume := b.Volume == "" // a volume of its own making goes with a failed create
	if madeVolume {
		b.Volume = "bastion-" + strings.ToLower(sanitizeName(opts.SessionID)) + "-" + randomID("")[:8]
	}
	if _, err := vols.CreateVolume(ctx, engine.VolumeSpec{Name: b.Volume, Labels: map[string]string{rules.LabelSession: opts.SessionID}}, true); err != nil {
		return fail(fmt.Errorf("create the shared workspace volume: %w", err))
	}
	ws := DefaultPaths().Workspace()
	shared := engine.VolumeMount{Name: b.Volume, Target: ws}
	res := BastionResult{Volume: b.Volume}
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, id := range []string{res.ControllerID, res.AgentID} {
			if id != "" {
				_ = p.eng.Terminate(cctx, id)
			}
		}
		if madeVolume {
			_ = vols.RemoveVolume(cctx, b.Volume)
		}
	}

	// The agent: the platform's boot, no tunnel, egress through the engine's
	// proxy with its secrets as placeholders.
	a := opts
	a.Spec.Volumes = append(append([]engine.VolumeMount(nil), opts.Spec.Volumes...), shared)
	a.Spec.Labels = map[string]string{}
	for k, v := range opts.Spec.Labels {
		a.Spec.Labels[k] = v
	}
	a.Spec.Labels[rules.LabelRole] = rules.RoleAgent
	a.Spec.Ports = nil
	p.progress("bastion: booting the agent sandbox")
	boot, err := p.agentProvider().Boot(ctx, a)
	if err != nil {
		cleanup() // Boot ends its own sandbox; the volume is left
		return BastionResult{}, err
	}
	res.AgentID, res.SidecarToken = boot.Info.ID, boot.SidecarToken
	relay := path.Join(ws, rules.BastionDir, rules.BastionRelaySocket)
	at := &engineTarget{p: p, id: res.AgentID, paths: boot.Paths}
	if err := at.StartDetached(ctx, "exec "+p.sandboxMCP()+" relay --socket "+ShellEscape(relay)+" > "+
		ShellEscape(path.Join(boot.Paths.Tmp, "bastion-relay.log"))+" 2>&1", nil); err != nil {
		cleanup()
		return fail(fmt.Errorf("start the agent's relay: %w", err))
	}

	p.progress("bastion: starting the controller sandbox")
	if err := p.startController(ctx, &res, opts, b, repo, shared); err != nil {
		cleanup()
		return fail(err)
	}
	// Both healthy: the agent's sidecar answers through the ingress, the
	// relay and the link.
	if err := p.waitBastion(ctx, res.IngressURL, b.PlatformToken); err != nil {
		cleanup()
		return fail(err)
	}
	res.CreateResult = boot.CreateResult
	res.SandboxID = res.AgentID
	res.SandboxMCPURL = res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(PortSandboxMCP)
	if boot.TunnelURL != "" {
		res.TunnelURL = res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(PortOpenCode)
	}
	if boot.PreviewURL != "" {
		res.PreviewURL = res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(PortPreview)
	}
	p.progress("bastion: session %s: agent %s, controller %s", opts.SessionID, res.AgentID, res.ControllerID)
	return res, nil
}

// bastionRemote is the controller's repository, when it has one.
type bastionRemote struct {
	URL, Name string
}

// bastionRepo checks the repository URL the gate will use.
func bastionRepo(raw, session string) (*bastionRemote, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bastion: repository %q: want an http(s) URL without credentials, query or fragment (the token goes in separately)", raw)
	}
	if _, err := gitpush.TargetRef(session); err != nil {
		return nil, fmt.Errorf("bastion: session id %q cannot name a branch: %w", session, err)
	}
	name := strings.TrimSuffix(path.Base(strings.TrimRight(u.Path, "/")), ".git")
	if name == "" || name == "." || name == "/" || strings.HasPrefix(name, ".") {
		name = "repo"
	}
	return &bastionRemote{URL: raw, Name: name}, nil
}

// sandboxMCP is how the provider starts sandbox-mcp inside.
func (p *Provider) sandboxMCP() string {
	if p.o.SandboxMCPCommand != "" {
		return ShellEscape(p.o.SandboxMCPCommand)
	}
	return "sandbox-mcp"
}

func sanitizeName(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// basicHeader is the http.extraHeader that sends token as git's password.
func basicHeader(token string) string {
	return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(gitpush.DefaultUsername+":"+token))
}
