package logtail

import (
	"unicode/utf8"
)

const utf8MaxLen = utf8.UTFMax

// utf8Stream turns a byte stream into valid UTF-8 text without splitting a
// character between two results: an incomplete sequence at the end of a push
// is held until the next push completes it (or flush gives up on it). Invalid
// bytes become U+FFFD, one per byte, as utf8.DecodeRune reads them.
type utf8Stream struct {
	pending []byte
}

// push returns the text of pending+raw up to the last complete character.
func (u *utf8Stream) push(raw []byte) string {
	data := raw
	if len(u.pending) > 0 {
		data = append(append(make([]byte, 0, len(u.pending)+len(raw)), u.pending...), raw...)
	}
	complete, rest := splitIncomplete(data)
	u.pending = append(u.pending[:0], rest...)
	return toValid(complete)
}

// held reports whether an incomplete sequence is held back.
func (u *utf8Stream) held() bool { return len(u.pending) > 0 }

// flush returns the held bytes as text (U+FFFD each) and forgets them.
func (u *utf8Stream) flush() string {
	s := toValid(u.pending)
	u.pending = u.pending[:0]
	return s
}

// splitIncomplete splits p before a trailing sequence that is a valid but
// incomplete UTF-8 encoding. Everything before the cut decodes the same alone
// as in the whole stream, because a sequence never extends past a leading byte.
func splitIncomplete(p []byte) (complete, rest []byte) {
	for i := len(p) - 1; i >= 0 && i > len(p)-utf8MaxLen; i-- {
		c := p[i]
		if c < utf8.RuneSelf {
			return p, nil
		}
		if !isContinuation(c) {
			if !utf8.FullRune(p[i:]) {
				return p[:i], p[i:]
			}
			return p, nil
		}
	}
	return p, nil
}

func isContinuation(c byte) bool { return c&0xC0 == 0x80 }

// toValid returns b as a string with each invalid byte replaced by U+FFFD.
func toValid(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return string(out)
}
