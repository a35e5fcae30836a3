package gitpush

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

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
	// DenyGlobs are path.Match patterns, matched on folded names (FoldName:
	// NFKC, invisible characters removed, lower case); one without '/' is
	// matched against each file's base name, one starting with "**/" against
	// the path's trailing components at any depth, another with '/' against
	// the whole path. nil means DefaultDenyGlobs; an empty non-nil slice
	// denies nothing.
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
		if _, err := path.Match(strings.TrimPrefix(g, "**/"), ""); err != nil {
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

// Denied returns the first deny glob p matches, or "". Both sides are folded
// (FoldName), so a name that reads as a denied one is denied: ".ENV" is .env
// to a case-insensitive checkout, and so are a fullwidth ".ｅｎｖ" and ".env"
// followed by a zero-width space to a reader.
func (p Policy) Denied(file string) string {
	folded := FoldName(file)
	base := path.Base(folded)
	for _, g := range p.DenyGlobs {
		fg := FoldName(g)
		target := base
		switch {
		case strings.HasPrefix(fg, "**/"):
			fg = fg[len("**/"):]
			target = trailing(folded, strings.Count(fg, "/")+1)
		case strings.Contains(fg, "/"):
			target = folded
		}
		if ok, _ := path.Match(fg, target); ok {
			return g
		}
	}
	return ""
}

// trailing is the last n slash-separated components of p (all of p when it
// has fewer).
func trailing(p string, n int) string {
	end := len(p)
	for ; n > 0; n-- {
		i := strings.LastIndexByte(p[:end], '/')
		if i < 0 {
			return p
		}
		end = i
	}
	return p[end+1:]
}

// FoldName is how a name reads: its Unicode compatibility form (NFKC, so a
// fullwidth "ｅｎｖ" is "env"), without the characters a reader does not see
// (zero-width spaces and joiners, the byte-order mark, bidirectional controls,
// soft hyphens, variation selectors and the other default-ignorable code
// points), in lower case.
func FoldName(s string) string {
	// Lower-casing can undo the normal form, and NFKC can make a character
	// that lower-cases: fold until stable, a bounded number of times.
	for range 4 {
		t := strings.ToLower(norm.NFKC.String(strings.Map(dropInvisible, s)))
		if t == s {
			break
		}
		s = t
	}
	return s
}

func dropInvisible(r rune) rune {
	if invisible(r) {
		return -1
	}
	return r
}

// invisible reports whether r is drawn as nothing: a format character (Cf:
// zero-width space, joiners, word joiner, BOM, bidi controls, soft hyphen),
// a variation selector or another default-ignorable code point.
func invisible(r rune) bool {
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
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
