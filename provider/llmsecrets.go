package provider

import (
	"errors"
	"fmt"
	"maps"
	"net/url"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// LLMKeyHosts are the API hosts of the LLM keys the boot plan gives OpenCode when it
// talks to the vendor directly; in proxy mode the key goes to the proxy's host.
var LLMKeyHosts = map[string][]string{
	EnvAnthropicAPIKey: {"api.anthropic.com"},
}

// LLMSecrets moves the LLM keys out of e's environment into Spec.Secrets, each sent
// only to its provider's API hosts (in proxy mode, to the proxy's host): the sandbox's
// variable then holds a placeholder, and the engine's egress proxy adds the key on the
// way out. It returns e without the keys, KeysAsSecrets set; an empty key is dropped.
func LLMSecrets(e SandboxEnv) (SandboxEnv, []engine.Secret, error) {
	out := e
	out.Env = maps.Clone(e.Env)
	out.KeysAsSecrets = true
	var secrets []engine.Secret
	for _, name := range []string{EnvAnthropicAPIKey} {
		v, ok := out.Env[name]
		if !ok {
			continue
		}
		delete(out.Env, name)
		if v == "" {
			continue
		}
		hosts := LLMKeyHosts[name]
		if e.ProxyMode() && name == EnvAnthropicAPIKey {
			u, err := url.Parse(e.ProxyBaseURL)
			if err != nil || u.Hostname() == "" {
				return e, nil, fmt.Errorf("the LLM proxy URL %q has no host to send its key to", e.ProxyBaseURL)
			}
			hosts = []string{u.Hostname()}
		}
		secrets = append(secrets, engine.Secret{Name: name, Value: v, Hosts: hosts})
	}
	return out, secrets, nil
}

// ErrLLMKeysRefused marks a boot refused because its LLM keys could not be kept out
// of the sandbox (see Options.LLMKeysInSandbox); it comes with engine.ErrUnsupported.
var ErrLLMKeysRefused = errors.New("LLM keys refused")

// llmSecrets are the boot's LLM keys as Spec.Secrets, none with
// Options.LLMKeysInSandbox (the plan then puts them in the environment). An engine
// without isolation has no egress proxy to add a key: a boot with one is refused
// there rather than given the key.
func (p *Provider) llmSecrets(opts CreateOptions) ([]engine.Secret, error) {
	if p.o.LLMKeysInSandbox {
		return nil, nil
	}
	var proxyURL string
	if p.o.Getenv != nil {
		proxyURL = LLMProxyBaseURL(p.o.Getenv)
	}
	_, keys, err := LLMSecrets(PrepareSandboxEnv(opts.SessionID, opts.EnvVars, proxyURL))
	if err != nil {
		return nil, err
	}
	if len(keys) > 0 && !p.caps.Isolated {
		return nil, fmt.Errorf("the LLM key in %s is refused, because this engine runs sandboxes without isolation, with no egress proxy to add the key on the way out; set Options.LLMKeysInSandbox to accept the key inside the sandbox: %w: %w",
			keys[0].Name, ErrLLMKeysRefused, engine.ErrUnsupported)
	}
	return keys, nil
}

// llmKeysHint says what to do when the engine refuses the LLM keys as secrets
// (Modal or E2B without an egress gateway, a local sandbox on the host's network):
// they are never degraded to environment variables unless the caller opts in.
func llmKeysHint(spec engine.Spec, err error) error {
	if !errors.Is(err, engine.ErrUnsupported) {
		return err
	}
	for _, s := range spec.Secrets {
		if _, ok := LLMKeyHosts[s.Name]; ok {
			return fmt.Errorf("the LLM key in %s is refused, because the engine cannot keep it out of the sandbox; let it carry secrets (an egress gateway for Modal or E2B; egress rather than Spec.Network on the local engine), or set Options.LLMKeysInSandbox to accept the key inside the sandbox: %w: %w",
				s.Name, ErrLLMKeysRefused, err)
		}
	}
	return err
}
