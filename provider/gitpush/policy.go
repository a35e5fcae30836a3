package gitpush

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// DefaultDenyGlobs are the file names a push refuses unless configured otherwise.
var DefaultDenyGlobs = rules.GitPushDenyGlobs()

// Default size caps.
const (
	DefaultMaxFileBytes  = rules.GitPushMaxFileBytes
	DefaultMaxTotalBytes = rules.GitPushMaxTotalBytes
)

// Policy decides what a push may carry.
type Policy struct {
	// DenyGlobs are path.Match patterns, matched ignoring case; one without
	// '/' is matched against each file's base name, one with '/' against its
	// whole path. nil means
	// DefaultDenyGlobs; an empty non-nil slice denies nothing.
	DenyGlobs []string
	// MaxFileBytes caps each new blob; 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
	// MaxTotalBytes caps the sum of the new blobs; 0 means DefaultMaxTotalBytes.
	MaxTotalBytes int64
}

func (p Policy) withDefaults() (Policy, error) {
	if p.DenyGlobs == nil {
		p.DenyGlobs = DefaultDenyGlobs
	}
	for _, g := range p.DenyGlobs {
		if g == "" {
			return p, fmt.Errorf("gitpush: empty deny glob")
		}
		if _, err := path.Match(g, ""); err != nil {
			return p, fmt.Errorf("gitpush: deny glob %q: %w", g, err)
		}
	}
	if p.MaxFileBytes <= 0 {
		p.MaxFileBytes = DefaultMaxFileBytes
	}
	if p.MaxTotalBytes <= 0 {
		p.MaxTotalBytes = DefaultMaxTotalBytes
	}
	return p, nil
}

// Denied returns the first deny glob p matches, or "". Matching ignores
// case (".ENV" is .env to a case-insensitive checkout).
func (p Policy) Denied(file string) string {
	lower := strings.ToLower(file)
	base := path.Base(lower)
	for _, g := range p.DenyGlobs {
		target := base
		if strings.Contains(g, "/") {
			target = lower
		}
		if ok, _ := path.Match(strings.ToLower(g), target); ok {
			return g
		}
	}
	return ""
}

// Refusal rules.
const (
	RuleBundle       = "bundle"
	RulePrerequisite = "prerequisite"
	RuleFastForward  = "fast-forward"
	RuleDenyGlob     = "deny-glob"
	RuleFileSize     = "file-size"
	RuleTotalSize    = "total-size"
	// RulePath is a path no checkout may hold (gitbundle.CheckPath).
	RulePath = "path"
)

// Refusal is one reason a push was refused.
type Refusal struct {
	Rule   string `json:"rule"`
	Path   string `json:"path,omitempty"`
	Detail string `json:"detail"`
}

// RefusedError says a push was refused and why; nothing was pushed.
type RefusedError struct {
	Target   string    `json:"target"`
	Refusals []Refusal `json:"refusals"`
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "push to %s refused:", e.Target)
	for i, r := range e.Refusals {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" " + r.Rule)
		if r.Path != "" {
			fmt.Fprintf(&b, " %q", r.Path)
		}
		b.WriteString(": " + r.Detail)
	}
	return b.String()
}

// sessionIDPattern is what a session id may look like: it becomes a branch name.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// TargetRef is the only ref a push for sessionID may write.
func TargetRef(sessionID string) (string, error) {
	if !sessionIDPattern.MatchString(sessionID) || strings.Contains(sessionID, "..") || strings.HasSuffix(sessionID, ".lock") ||
		strings.HasSuffix(sessionID, ".") {
		return "", fmt.Errorf("gitpush: session id %q cannot name a branch", sessionID)
	}
	return rules.SessionBranchPrefix + sessionID, nil
}
