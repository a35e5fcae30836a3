package modalserver

import (
	"strings"
)

// buildSteps is what the server makes of an image's Dockerfile commands after FROM:
// the steps it applies itself (ENV into every exec's environment, WORKDIR as the
// default working directory; ARG, LABEL and EXPOSE change nothing a sandbox sees) and
// the ones it cannot run (RUN, COPY, USER, …: they need an image builder).
type buildSteps struct {
	env     []string // KEY=VALUE, in order
	workdir string
	unrun   []string
}

// parseBuildSteps reads Dockerfile commands (one instruction each, as the SDKs send
// them).
func parseBuildSteps(cmds []string) buildSteps {
	var b buildSteps
	for _, c := range cmds {
		c = strings.TrimSpace(c)
		if c == "" || strings.HasPrefix(c, "#") {
			continue
		}
		op, rest, _ := strings.Cut(c, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(op) {
		case "ENV":
			b.env = append(b.env, parseEnv(rest)...)
		case "WORKDIR":
			if strings.HasPrefix(rest, "/") {
				b.workdir = rest
			} else if rest != "" {
				b.workdir = strings.TrimSuffix(b.workdir, "/") + "/" + rest
			}
		case "ARG", "LABEL", "EXPOSE":
		default:
			b.unrun = append(b.unrun, c)
		}
	}
	return b
}

// parseEnv reads ENV's two forms: KEY=VALUE pairs (values may be quoted) and the
// legacy KEY VALUE.
func parseEnv(s string) []string {
	key, val, _ := strings.Cut(s, " ")
	if !strings.Contains(key, "=") {
		if key == "" {
			return nil
		}
		return []string{key + "=" + strings.TrimSpace(val)}
	}
	var out []string
	for _, f := range splitQuoted(s) {
		k, v, ok := strings.Cut(f, "=")
		if ok && k != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// splitQuoted splits on spaces outside double or single quotes and drops the quotes;
// a backslash keeps the next character.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	esc, have := false, false
	for _, r := range s {
		switch {
		case esc:
			cur.WriteRune(r)
			esc = false
		case r == '\\' && quote != '\'':
			esc, have = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '"' || r == '\''):
			quote, have = r, true
		case quote == 0 && (r == ' ' || r == '\t'):
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}
