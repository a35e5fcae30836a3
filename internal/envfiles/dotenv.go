package envfiles

import (
	"fmt"
	"strings"
)

// Line is one "KEY=value\n" line of an env file, the value quoted by Quote.
func Line(key, value string) string { return key + "=" + Quote(value) + "\n" }

// Quote returns value as a dotenv value. A value that holds a newline, carriage
// return, tab, either quote, a backtick, a backslash, '#', or leading or
// trailing white space is double-quoted, with backslash, double quote,
// newline, carriage return and tab escaped (\\ \" \n \r \t), the escapes that
// python-dotenv, godotenv, Ruby dotenv and Docker Compose all read back. Other
// values, '=' and '$' included, are written bare: every parser splits at the
// first '=', and '$' is left alone because parsers disagree on how to escape
// it (those that expand variables, like dotenv-expand, will expand "${X}").
func Quote(value string) string {
	if !needsQuote(value) {
		return value
	}
	var b strings.Builder
	b.Grow(len(value) + 2)
	b.WriteByte('"')
	for i := 0; i < len(value); i++ {
		switch c := value[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func needsQuote(v string) bool {
	if v == "" {
		return false
	}
	if strings.ContainsAny(v, "\n\r\t\"'`\\#") {
		return true
	}
	return v[0] == ' ' || v[len(v)-1] == ' '
}

// Parse reads a dotenv file: KEY=value lines, optionally prefixed by "export ",
// blank lines and '#' comments. Values are bare (trimmed, cut at " #"),
// single-quoted (literal) or double-quoted (with the escapes Quote writes; a
// quoted value may span lines). Later keys win.
func Parse(data string) (map[string]string, error) {
	out := map[string]string{}
	s := data
	lineNo := 1
	for len(s) > 0 {
		// One logical line.
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			break
		}
		if s[0] == '\n' || s[0] == '\r' {
			if s[0] == '\n' {
				lineNo++
			}
			s = s[1:]
			continue
		}
		if s[0] == '#' {
			s = skipLine(s)
			continue
		}
		s = strings.TrimPrefix(s, "export ")
		eq := strings.IndexAny(s, "=\n")
		if eq < 0 || s[eq] != '=' {
			return nil, fmt.Errorf("line %d: want KEY=value", lineNo)
		}
		key := strings.TrimSpace(s[:eq])
		if key == "" {
			return nil, fmt.Errorf("line %d: empty key", lineNo)
		}
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val string
		switch {
		case strings.HasPrefix(s, `"`):
			v, rest, n, err := parseDouble(s[1:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			val, s, lineNo = v, rest, lineNo+n
			s = skipLine(s)
		case strings.HasPrefix(s, `'`):
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated single quote", lineNo)
			}
			val = s[1 : 1+end]
			lineNo += strings.Count(val, "\n")
			s = skipLine(s[2+end:])
		default:
			end := strings.IndexAny(s, "\r\n")
			if end < 0 {
				end = len(s)
			}
			val = s[:end]
			if i := strings.Index(val, " #"); i >= 0 {
				val = val[:i]
			}
			val = strings.TrimRight(val, " \t")
			s = s[end:]
		}
		out[key] = val
	}
	return out, nil
}

// parseDouble reads a double-quoted value after its opening quote and returns
// the value, the rest after the closing quote, and the newlines it spanned.
func parseDouble(s string) (string, string, int, error) {
	var b strings.Builder
	lines := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), s[i+1:], lines, nil
		case '\\':
			if i+1 >= len(s) {
				return "", "", 0, fmt.Errorf("unterminated double quote")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '\\', '"':
				b.WriteByte(s[i])
			default:
				b.WriteByte('\\')
				b.WriteByte(s[i])
			}
		case '\n':
			lines++
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", 0, fmt.Errorf("unterminated double quote")
}

// skipLine drops everything up to the end of the line (a trailing comment).
func skipLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[i:]
	}
	return ""
}
