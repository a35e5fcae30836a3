package provider

import (
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
// way out. It returns e without the keys; an empty key is dropped.
func LLMSecrets(e SandboxEnv) (SandboxEnv, []engine.Secret, error) {
	out := e
	out.Env = maps.Clone(e.Env)
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
