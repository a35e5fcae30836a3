package docsearch

import (
	"regexp"
	"strings"
)

// A TypeScript source is scanned, not parsed: its top-level statements are found by
// tracking brackets outside strings, template literals and comments, and a statement
// that starts with `export` (or, in a declaration file, `declare`) is one export with
// the doc comment just before it. That is enough for the declarations npm packages ship
// (.d.ts) and for the modules a model writes, and it never fails: text it cannot make
// sense of yields fewer exports, not an error. Its input is untrusted (packages, model
// code), so it is bounded and fuzzed.

// Export is one top-level exported declaration of a TypeScript source.
type Export struct {
	// Name is the declared name ("default" for an export default without one; the
	// module specifier for a re-export).
	Name string
	// Kind is function, class, interface, type, const, let, var, enum, namespace,
	// default or reexport.
	Kind string
	// Signature is the declaration up to its body: `function f(a: string): number`.
	Signature string
	// Doc is the text of the /** … */ comment just before it, without the stars.
	Doc string
	// Text is the whole statement with its doc comment, at most maxExportText bytes.
	Text string
}

// maxExportText caps one export's Text; maxScan caps the source scanned.
const (
	maxExportText = 8 << 10
	maxScan       = 4 << 20
	maxExports    = 2000
)

var declRE = regexp.MustCompile(`^(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?(?:async\s+)?` +
	`(function\*?|class|interface|type|const|let|var|enum|namespace|module)\s+([A-Za-z_$][\w$]*|"[^"]*"|'[^']*')`)

// Exports scans a TypeScript source for its top-level exports, in order. With
// declarations (a .d.ts file), `declare …` statements count too.
func Exports(src string, declarations bool) []Export {
	if len(src) > maxScan {
		src = src[:maxScan]
	}
	var out []Export
	for _, st := range statements(src) {
		text := strings.TrimSpace(st.text)
		isExport := strings.HasPrefix(text, "export ") || strings.HasPrefix(text, "export{") || strings.HasPrefix(text, "export*")
		if !isExport && !(declarations && strings.HasPrefix(text, "declare ")) {
			continue
		}
		e := describe(text)
		if e.Kind == "" {
			continue
		}
		e.Doc = docText(st.doc)
		full := text
		if st.doc != "" {
			full = st.doc + "\n" + text
		}
		e.Text = clip(full, maxExportText)
		out = append(out, e)
		if len(out) >= maxExports {
			break
		}
	}
	return out
}

// describe names an exported statement.
func describe(text string) Export {
	rest := strings.TrimSpace(strings.TrimPrefix(text, "export"))
	switch {
	case strings.HasPrefix(rest, "*") || strings.HasPrefix(rest, "{"):
		sig := signature(text, "reexport")
		name := ""
		if i := strings.Index(text, "from"); i >= 0 {
			name = strings.Trim(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(text[i+4:]), ";")), `"'`)
		}
		if name == "" {
			name = strings.Trim(rest, "{}; \n")
		}
		return Export{Name: clip(name, 200), Kind: "reexport", Signature: sig}
	case strings.HasPrefix(rest, "="):
		return Export{Name: "default", Kind: "default", Signature: signature(text, "reexport")}
	}
	m := declRE.FindStringSubmatch(text)
	if m == nil {
		if strings.HasPrefix(rest, "default") {
			return Export{Name: "default", Kind: "default", Signature: signature(text, "default")}
		}
		return Export{}
	}
	kind := strings.TrimSuffix(m[1], "*")
	if kind == "module" {
		kind = "namespace"
	}
	return Export{Name: strings.Trim(m[2], `"'`), Kind: kind, Signature: signature(text, kind)}
}

// signature is a declaration without its body, on one line: up to the first `{` at
// bracket depth 0 for functions, classes, interfaces, enums and namespaces, up to the
// value's `=` for variables, the whole of a type alias or a bodiless declaration.
func signature(text, kind string) string {
	cut := ""
	switch kind {
	case "function", "class", "interface", "enum", "namespace":
		cut = "{"
	case "const", "let", "var", "default":
		cut = "="
	}
	end := len(text)
	depth := 0
	for i := 0; cut != "" && i < len(text); i++ {
		c := text[i]
		switch c {
		case '(', '[', '<':
			depth++
			continue
		case ')', ']':
			depth = max(depth-1, 0)
			continue
		case '>':
			if i > 0 && text[i-1] != '=' {
				depth = max(depth-1, 0)
			}
			continue
		}
		if depth > 0 || c != cut[0] {
			continue
		}
		if c == '=' && (i+1 < len(text) && (text[i+1] == '>' || text[i+1] == '=') || i > 0 && strings.ContainsRune("=!<>", rune(text[i-1]))) {
			continue
		}
		end = i
		break
	}
	return clip(strings.Join(strings.Fields(strings.TrimSuffix(strings.TrimSpace(text[:end]), ";")), " "), 500)
}

// docText is a /** … */ comment's text without its markers and leading stars.
func docText(c string) string {
	c = strings.TrimSpace(c)
	c = strings.TrimPrefix(c, "/**")
	c = strings.TrimSuffix(c, "*/")
	var lines []string
	for l := range strings.Lines(c) {
		l = strings.TrimSpace(l)
		l = strings.TrimSpace(strings.TrimPrefix(l, "*"))
		lines = append(lines, l)
	}
	return clip(strings.TrimSpace(strings.Join(lines, "\n")), maxExportText)
}

// clip cuts s to at most n bytes at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// statement is one top-level statement and the doc comment before it.
type statement struct {
	doc, text string
}

// statements splits a source into top-level statements: at `;` or a newline after a
// closed block at bracket depth 0, skipping strings, template literals and comments.
// The last /** */ comment at depth 0 before a statement is its doc.
func statements(src string) []statement {
	var out []statement
	depth := 0
	start := -1 // start of the current statement, -1 between statements
	doc := ""
	lastClose := false // the last token at depth 0 closed a block
	flush := func(end int) {
		if start >= 0 && end > start {
			if t := strings.TrimSpace(src[start:end]); t != "" {
				out = append(out, statement{doc: doc, text: t})
			}
		}
		start, doc, lastClose = -1, "", false
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				i = len(src)
			} else {
				i += j - 1
			}
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			j := strings.Index(src[i+2:], "*/")
			end := len(src)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			if depth == 0 && start < 0 && strings.HasPrefix(src[i:], "/**") {
				doc = src[i:end]
			}
			i = end - 1
			continue
		case c == '"' || c == '\'' || c == '`':
			if start < 0 {
				start = i
			}
			i = skipString(src, i)
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		case c == '\n':
			if depth == 0 && lastClose {
				flush(i)
			}
			continue
		}
		if start < 0 {
			start = i
		}
		lastClose = false
		switch c {
		case '{', '(', '[':
			depth++
		case '}', ')', ']':
			if depth > 0 {
				depth--
			}
			if depth == 0 && c == '}' {
				lastClose = true
			}
		case ';':
			if depth == 0 {
				flush(i + 1)
			}
		}
	}
	flush(len(src))
	return out
}

// skipString returns the index of the closing quote of the string or template
// literal starting at i (the end of src when unclosed). Template substitutions are
// skipped by brace counting.
func skipString(src string, i int) int {
	q := src[i]
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case '\n':
			if q != '`' {
				return j - 1 // an unclosed quote ends at the line
			}
		case '$':
			if q == '`' && j+1 < len(src) && src[j+1] == '{' {
				depth := 0
				for j++; j < len(src); j++ {
					if src[j] == '{' {
						depth++
					} else if src[j] == '}' {
						depth--
						if depth == 0 {
							break
						}
					}
				}
			}
		case q:
			return j
		}
	}
	return len(src) - 1
}

// ChunkDeclarations makes one chunk per export of a TypeScript declaration file:
// titled by kind and name, its content the doc comment and the declaration.
func ChunkDeclarations(src string) []Chunk {
	var chunks []Chunk
	for _, e := range Exports(src, true) {
		if e.Kind == "reexport" {
			continue
		}
		for _, part := range splitLong(e.Text) {
			chunks = append(chunks, Chunk{Title: e.Kind + " " + e.Name, Content: part})
		}
	}
	return chunks
}
