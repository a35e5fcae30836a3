package provider

// The controller of a bastion session and the rules that bind the pair:
// both end together, neither pauses or snapshots alone.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// startController creates the controller sandbox, clones the repository into
// the shared workspace (git directory on its own disk) and starts
// `sandbox-mcp bastion`; res gets its id and ingress URL.
func (p *Provider) startController(ctx context.Context, res *BastionResult, opts CreateOptions, b BastionOptions, repo *bastionRemote, shared engine.VolumeMount) error {
	timeout := opts.Spec.Timeout
	if timeout == 0 {
		timeout = p.o.Timeout
	}
	// The credentials are in this sandbox's environment only; it runs no agent
	// code and reaches nothing but the remote.
	spec := engine.Spec{Image: opts.Spec.Image, Runtime: opts.Spec.Runtime, Volumes: []engine.VolumeMount{shared},
		Ports: []int{rules.PortBastionIngress}, Timeout: timeout,
		Env:    []string{rules.EnvBastionToken + "=" + b.PlatformToken, rules.EnvBastionAgentToken + "=" + res.SidecarToken},
		Labels: map[string]string{rules.LabelRole: rules.RoleController, rules.LabelSession: opts.SessionID}}
	if repo != nil {
		u, _ := url.Parse(repo.URL)
		spec.Egress, spec.EgressHosts = true, []string{u.Hostname()}
		if b.RepoToken != "" {
			spec.Env = append(spec.Env, rules.EnvBastionGitToken+"="+b.RepoToken)
		}
	}
	if err := CheckSpec(p.caps, false, spec); err != nil {
		return fmt.Errorf("controller sandbox: %w", err)
	}
	info, err := p.eng.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("create the controller sandbox: %w", err)
	}
	res.ControllerID = info.ID
	paths := DefaultPaths()
	ct := &engineTarget{p: p, id: info.ID, paths: paths}
	bastionDir := path.Join(shared.Target, rules.BastionDir)
	relay := path.Join(bastionDir, rules.BastionRelaySocket)
	if err := p.checkLink(ctx, ct, relay, shared.Name); err != nil {
		return err
	}
	args := []string{"bastion", "--ports", joinInts(b.AgentPorts), "--relay-socket", relay}
	if repo != nil {
		work := path.Join(shared.Target, repo.Name)
		env := map[string]string{"GIT_TERMINAL_PROMPT": "0"}
		if b.RepoToken != "" {
			env["GIT_CONFIG_COUNT"], env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"] = "1", "http."+repo.URL+".extraHeader", basicHeader(b.RepoToken)
		}
		r, err := ct.Exec(ctx, "git -c credential.helper= clone --quiet --separate-git-dir "+ShellEscape(rules.BastionGitDir)+" -- "+
			ShellEscape(repo.URL)+" "+ShellEscape(work), env, 5*time.Minute)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exit code %d: %s", r.ExitCode, CapOutput(RedactSecrets(r.Stderr), 1024))
		}
		if err != nil {
			return fmt.Errorf("clone %s in the controller: %w", repo.URL, err)
		}
		args = append(args, "--git-socket", path.Join(bastionDir, rules.BastionGitSocket), "--workspace", work,
			"--git-dir", rules.BastionGitDir, "--session", opts.SessionID, "--remote", repo.URL)
	}
	cmd := "exec " + p.sandboxMCP()
	for _, a := range args {
		cmd += " " + ShellEscape(a)
	}
	if err := ct.StartDetached(ctx, cmd+" > "+ShellEscape(path.Join(paths.Tmp, "bastion.log"))+" 2>&1", nil); err != nil {
		return fmt.Errorf("start the controller: %w", err)
	}
	if res.IngressURL, err = p.portURL(ctx, info, rules.PortBastionIngress); err != nil {
		return fmt.Errorf("find the controller's ingress: %w", err)
	}
	return nil
}

// linkWait bounds the controller's wait for the agent's relay socket.
const linkWait = 20 * time.Second

// checkLink refuses the pair, before anything runs in the controller, when the
// controller does not see the agent's relay socket on the shared volume: the
// engine's volumes are not shared live between running sandboxes (real
// Modal's, docs/bastion.md), so no link could ever form.
func (p *Provider) checkLink(ctx context.Context, ct *engineTarget, relay, volume string) error {
	tries := int(linkWait / (100 * time.Millisecond))
	r, err := ct.Exec(ctx, "i=0; while [ $i -lt "+strconv.Itoa(tries)+" ]; do [ -S "+ShellEscape(relay)+" ] && exit 0; sleep 0.1; i=$((i+1)); done; exit 1",
		nil, linkWait+30*time.Second)
	if err != nil {
		return fmt.Errorf("look for the agent's relay socket in the controller: %w", err)
	}
	if r.ExitCode != 0 {
		return NewProviderError(p.o.Kind, OpCreateSandbox, fmt.Sprintf("bastion: the controller does not see the agent's relay socket %s on the shared volume %s within %v: "+
			"%s does not share a volume live between running sandboxes, so the pair cannot link (docs/bastion.md says what each engine offers); "+
			"create without the bastion option", relay, volume, linkWait, p.o.Kind), false, engine.ErrUnsupported)
	}
	return nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// waitBastion waits until the agent's sidecar answers through the
// controller's ingress: the ingress, the link and the agent all work.
func (p *Provider) waitBastion(ctx context.Context, ingressURL, token string) error {
	u := ingressURL + rules.BastionPortPrefix + strconv.Itoa(PortSandboxMCP) + "/api/health"
	deadline := time.Now().Add(p.o.SidecarTimeout)
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := p.hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent's sidecar did not answer through the controller's ingress within %v (last: %s); "+
				"see /tmp/bastion.log in the controller and /tmp/bastion-relay.log in the agent", p.o.SidecarTimeout, RedactSecrets(last))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bastionPair returns the sandboxes of the pair id belongs to (itself
// first), their labels read, or nil when id is not part of a bastion session.
func (p *Provider) bastionPair(ctx context.Context, id string) ([]engine.Info, error) {
	info, err := p.eng.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	session := info.Labels[rules.LabelSession]
	if info.Labels[rules.LabelRole] == "" || session == "" {
		return nil, nil
	}
	out := []engine.Info{info}
	all, err := p.eng.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, in := range all {
		if in.ID == id {
			continue
		}
		if in.Labels == nil {
			if in, err = p.eng.Get(ctx, in.ID); err != nil {
				continue
			}
		}
		if in.Labels[rules.LabelRole] != "" && in.Labels[rules.LabelSession] == session {
			out = append(out, in)
		}
	}
	return out, nil
}

// terminatePair ends every sandbox of id's bastion session; handled is false
// when id is not part of one.
func (p *Provider) terminatePair(ctx context.Context, id string) (handled bool, err error) {
	pair, err := p.bastionPair(ctx, id)
	if err != nil || len(pair) == 0 {
		return false, nil // a gone sandbox, or a plain one: the single terminate
	}
	var errs []error
	for _, x := range pair {
		if err := p.eng.Terminate(ctx, x.ID); err != nil && !errors.Is(err, engine.ErrNotFound) {
			errs = append(errs, fmt.Errorf("terminate %s: %w", x.ID, err))
		}
	}
	return true, errors.Join(errs...)
}

// RefuseBastion refuses op on a sandbox of a bastion session: pausing or
// snapshotting one half alone would leave the other running against it. Nil
// for any other sandbox, or one the engine cannot find (the op says so).
func (p *Provider) RefuseBastion(ctx context.Context, id string, op Operation) error {
	info, err := p.eng.Get(ctx, id)
	if err != nil || info.Labels[rules.LabelRole] == "" {
		return nil
	}
	return NewProviderError(p.o.Kind, op, fmt.Sprintf("sandbox %s is the %s of bastion session %s: %s acts on the pair: "+
		"pause and resume it with PausePair and ResumePair (sandboxctl pause|resume); a snapshot of the pair is not built", id, info.Labels[rules.LabelRole], info.Labels[rules.LabelSession], op), false, engine.ErrUnsupported)
}

// WatchBastion ends the pair when either of its sandboxes dies or goes,
// checking every interval (default one second), until ctx ends or it has
// ended the pair.
func (p *Provider) WatchBastion(ctx context.Context, agentID, controllerID string, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, id := range []string{agentID, controllerID} {
			info, err := p.eng.Get(ctx, id)
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, engine.ErrNotFound) || err == nil && info.State == engine.StateDead {
				p.log.Warn("bastion: one sandbox of the pair ended; ending the other", "sandbox_id", id)
				for _, x := range []string{agentID, controllerID} {
					if err := p.eng.Terminate(ctx, x); err != nil && !errors.Is(err, engine.ErrNotFound) {
						return fmt.Errorf("terminate %s after its peer ended: %w", x, err)
					}
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// failUnlessGone is Terminate's error rule: a gone sandbox is success.
func (p *Provider) failUnlessGone(op Operation, err error) error {
	if err == nil || errors.Is(err, engine.ErrNotFound) || IsNotFoundMessage(err.Error()) {
		return nil
	}
	return p.fail(op, err)
}

// PausePair pauses both sandboxes of id's bastion session, the controller
// first, so that nothing reaches a paused agent through it; handled is false
// when id is not part of one. (Provider.Pause refuses a half: the platform's
// restore resumes one sandbox, not a pair.)
func (p *Provider) PausePair(ctx context.Context, id string) (handled bool, err error) {
	return p.pairDo(ctx, id, true)
}

// ResumePair resumes both sandboxes of id's bastion session, the agent first
// and the controller, the only way in, last.
func (p *Provider) ResumePair(ctx context.Context, id string) (handled bool, err error) {
	return p.pairDo(ctx, id, false)
}

func (p *Provider) pairDo(ctx context.Context, id string, pause bool) (bool, error) {
	pair, err := p.bastionPair(ctx, id)
	if err != nil || len(pair) == 0 {
		return false, nil // gone, or a plain sandbox: the single pause reports it
	}
	if !p.caps.Pause {
		return true, PauseUnsupportedError(p.o.Kind)
	}
	// Pausing: the controller first; resuming: the agent first.
	first := rules.RoleController
	if !pause {
		first = rules.RoleAgent
	}
	slices.SortStableFunc(pair, func(a, b engine.Info) int {
		ra, rb := a.Labels[rules.LabelRole], b.Labels[rules.LabelRole]
		switch {
		case ra == first && rb != first:
			return -1
		case rb == first && ra != first:
			return 1
		}
		return 0
	})
	for _, x := range pair {
		op, verb := p.eng.Resume, "resume"
		if pause {
			op, verb = p.eng.Pause, "pause"
		}
		if err := op(ctx, x.ID); err != nil {
			return true, fmt.Errorf("%s the %s %s of bastion session: %w", verb, x.Labels[rules.LabelRole], x.ID, err)
		}
	}
	return true, nil
}
