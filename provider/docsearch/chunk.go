package docsearch

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Chunk is one section of a markdown document.
type Chunk struct {
	// Title is the section's `## ` heading; the text before the first one is titled by
	// the document's `# ` heading, else "Introduction".
	Title string
	// Content is the section's text, heading included, trimmed.
	Content string
}

// Hash is the hex SHA-256 of the chunk's title and content: unchanged chunks are not
// indexed again.
func (c Chunk) Hash() string {
	h := sha256.New()
	h.Write([]byte(c.Title))
	h.Write([]byte{0})
	h.Write([]byte(c.Content))
	return hex.EncodeToString(h.Sum(nil))
}

// maxChunkBytes caps one chunk: a longer section is split at line ends so one huge
// section cannot dominate an index entry or an embedding request.
const maxChunkBytes = 16 << 10

// ChunkMarkdown splits a markdown document at its `## ` headings. Headings inside
// fenced code blocks (``` or ~~~) do not split. Empty sections are dropped.
func ChunkMarkdown(md string) []Chunk {
	md = strings.ReplaceAll(md, "\r\n", "\n")
	var chunks []Chunk
	docTitle := ""
	title := ""
	var body strings.Builder
	flush := func() {
		content := strings.TrimSpace(body.String())
		body.Reset()
		if content == "" || (title != "" && content == "## "+title) {
			return
		}
		t := title
		if t == "" {
			t = docTitle
		}
		if t == "" {
			t = "Introduction"
		}
		for _, part := range splitLong(content) {
			chunks = append(chunks, Chunk{Title: t, Content: part})
		}
	}
	fence := ""
	for line := range strings.Lines(md) {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			body.WriteString(line)
			continue
		}
		switch {
		case strings.HasPrefix(trimmed, "```"):
			fence = "```"
		case strings.HasPrefix(trimmed, "~~~"):
			fence = "~~~"
		case strings.HasPrefix(line, "## "):
			flush()
			title = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line[3:]), "#"))
			title = strings.TrimSpace(strings.TrimRight(title, "#"))
		case strings.HasPrefix(line, "# ") && docTitle == "" && title == "":
			docTitle = strings.TrimSpace(line[2:])
		}
		body.WriteString(line)
	}
	flush()
	return chunks
}

// splitLong cuts content into parts of at most maxChunkBytes, at line ends when it can
// and always at valid UTF-8 boundaries.
func splitLong(s string) []string {
	var parts []string
	for len(s) > maxChunkBytes {
		cut := strings.LastIndexByte(s[:maxChunkBytes], '\n')
		if cut <= 0 {
			cut = maxChunkBytes
			for cut > 0 && !isRuneStart(s[cut]) {
				cut--
			}
			if cut == 0 {
				cut = maxChunkBytes
			}
		}
		if p := strings.TrimSpace(s[:cut]); p != "" {
			parts = append(parts, p)
		}
		s = s[cut:]
	}
	if p := strings.TrimSpace(s); p != "" {
		parts = append(parts, p)
	}
	return parts
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
