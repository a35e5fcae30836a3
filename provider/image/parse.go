package image

import (
	"encoding/json"
	"strconv"
	"strings"
)

// ParseCommands reads Dockerfile commands after FROM, one instruction per string as
// Modal's DockerfileCommands sends them (backslash-newline continues a line), into an
// image on from. It takes RUN (shell and exec form), ENV, WORKDIR, USER, EXPOSE and
// CMD; other instructions, COPY/ADD (there is no build context) and variable
// references in ENV are refused with the reason, never skipped.
func ParseCommands(from string, commands []string) (Image, error) {
	img := Image{From: from}
	for _, c := range commands {
		line := strings.TrimSpace(strings.ReplaceAll(c, "\\\n", ""))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, "\r\n") {
			return Image{}, invalid("command %q spans lines (heredocs are not supported)", firstLine(line))
		}
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		if err := img.parseInstruction(strings.ToUpper(word), rest); err != nil {
			return Image{}, err
		}
	}
	return img, img.Validate()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func (img *Image) parseInstruction(word, rest string) error {
	switch word {
	case "RUN":
		if strings.HasPrefix(rest, "--") {
			return invalid("RUN options (%s) are not supported", strings.Fields(rest)[0])
		}
		cmd, err := shellForm(rest)
		if err != nil {
			return err
		}
		img.Steps = append(img.Steps, Run(cmd))
	case "ENV":
		kv, err := parseEnv(rest)
		if err != nil {
			return err
		}
		img.Steps = append(img.Steps, Env(kv...))
	case "WORKDIR":
		img.Steps = append(img.Steps, WorkDir(rest))
	case "USER":
		img.Steps = append(img.Steps, User(rest))
	case "EXPOSE":
		for _, f := range strings.Fields(rest) {
			p, err := strconv.Atoi(strings.TrimSuffix(f, "/tcp"))
			if err != nil {
				return invalid("EXPOSE %q is not a TCP port", f)
			}
			img.Expose = append(img.Expose, p)
		}
	case "CMD":
		var argv []string
		if err := json.Unmarshal([]byte(rest), &argv); err != nil {
			argv = []string{"/bin/sh", "-c", rest}
		}
		img.Cmd = argv
	case "COPY", "ADD":
		return invalid("%s needs a build context, which these commands do not have", word)
	default:
		return invalid("instruction %s is not supported", word)
	}
	return nil
}

// shellForm is a RUN's command: the text, or an exec form's arguments quoted for sh.
func shellForm(rest string) (string, error) {
	if !strings.HasPrefix(rest, "[") {
		return rest, nil
	}
	var argv []string
	if err := json.Unmarshal([]byte(rest), &argv); err != nil || len(argv) == 0 {
		return "", invalid("RUN %q is neither a shell command nor a JSON array of strings", rest)
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " "), nil
}

// parseEnv reads ENV's K=V pairs (or the old "K V" form), with Dockerfile quoting.
func parseEnv(rest string) ([]string, error) {
	words, err := envWords(rest)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, invalid("ENV without variables")
	}
	if k, _, ok := strings.Cut(words[0].text, "="); !ok || k == "" {
		// ENV KEY value with spaces
		key, value, _ := strings.Cut(rest, " ")
		return []string{key, strings.TrimSpace(value)}, nil
	}
	var kv []string
	for _, w := range words {
		k, v, ok := strings.Cut(w.text, "=")
		if !ok {
			return nil, invalid("ENV %q is not KEY=VALUE", w.text)
		}
		kv = append(kv, k, v)
	}
	return kv, nil
}

type envWord struct{ text string }

// envWords splits s at unquoted blanks, removing quotes and escapes; an unescaped $ is
// an error (the local build does not expand variables).
func envWords(s string) ([]envWord, error) {
	var words []envWord
	var cur strings.Builder
	in := false
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'' && c != '\'':
			cur.WriteByte(c)
		case c == '\\' && quote != '\'':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
		case c == '$':
			return nil, invalid("ENV %q refers to a variable; the local build does not expand them", s)
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote, in = c, true
		case quote == 0 && (c == ' ' || c == '\t'):
			if in {
				words = append(words, envWord{cur.String()})
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, invalid("ENV %q has an unclosed quote", s)
	}
	if in {
		words = append(words, envWord{cur.String()})
	}
	return words, nil
}
