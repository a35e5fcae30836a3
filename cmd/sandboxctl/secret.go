package main

import (
	"fmt"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// parseSecrets turns --secret NAME:host[,host]… values into Spec.Secrets, each value
// read from the host's variable NAME, and validates them as the engine will
// (egress.NewSecrets), so a bad one is refused before anything is created.
func parseSecrets(vals []string, getenv func(string) string) ([]engine.Secret, error) {
	var out []engine.Secret
	for _, v := range vals {
		name, hosts, ok := strings.Cut(v, ":")
		if !ok || name == "" || hosts == "" {
			return nil, fmt.Errorf("--secret %q: want NAME:host[,host]…", v)
		}
		if !egress.IsEnvName(name) {
			return nil, fmt.Errorf("--secret %q: %q is not an environment variable name", v, name)
		}
		value := getenv(name)
		if value == "" {
			return nil, fmt.Errorf("--secret %s: the host's variable %s is empty or unset; it holds the value", name, name)
		}
		out = append(out, engine.Secret{Name: name, Value: value, Hosts: strings.Split(hosts, ",")})
	}
	if _, err := egress.NewSecrets(out); err != nil {
		return nil, fmt.Errorf("--secret: %w", err)
	}
	return out, nil
}
