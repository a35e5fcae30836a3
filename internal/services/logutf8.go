package services

import (
	"io"
	"unicode/utf8"
)

// charWriter passes a service's output to the log writer in writes that each
// end at a UTF-8 character boundary: the 1–3 bytes of a character cut by the
// end of one pipe read are held until the next read brings the rest. The log
// therefore rotates only between characters (rotatingWriter rotates between
// writes), and a reader finds an incomplete character at the end of the log
// only while a write is under way. Finish, when the run's output has ended,
// writes what is still held as U+FFFD, one per byte (as a reader decodes
// them), so a follower never waits for bytes that will not come.
// Bytes that are not UTF-8 at all pass through unchanged.
type charWriter struct {
	w    io.Writer
	held []byte
	buf  []byte
}

func newCharWriter(w io.Writer) *charWriter {
	return &charWriter{w: w, held: make([]byte, 0, utf8.UTFMax)}
}

// Write writes p up to its last complete character and holds the rest. It
// reports len(p) written unless the underlying write fails.
func (c *charWriter) Write(p []byte) (int, error) {
	data := p
	if len(c.held) > 0 {
		c.buf = append(append(c.buf[:0], c.held...), p...)
		data = c.buf
	}
	cut := len(data) - incompleteTail(data)
	if cut > 0 {
		if _, err := c.w.Write(data[:cut]); err != nil {
			// What was written is unknown: hold nothing back.
			c.held = c.held[:0]
			return 0, err
		}
	}
	c.held = append(c.held[:0], data[cut:]...)
	if cap(c.buf) > 64<<10 {
		c.buf = nil
	}
	return len(p), nil
}

// Finish writes the held bytes, if any, as U+FFFD each.
func (c *charWriter) Finish() error {
	if len(c.held) == 0 {
		return nil
	}
	out := make([]byte, 0, len(c.held)*utf8.RuneLen(utf8.RuneError))
	for range c.held {
		out = utf8.AppendRune(out, utf8.RuneError)
	}
	c.held = c.held[:0]
	_, err := c.w.Write(out)
	return err
}

// incompleteTail returns the length of a valid but incomplete UTF-8 sequence
// at the end of p (0 to 3): a leading byte followed by fewer continuation
// bytes than it announces, which more input could still complete.
func incompleteTail(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-(utf8.UTFMax-1); i-- {
		c := p[i]
		if c < utf8.RuneSelf {
			return 0
		}
		if c&0xC0 != 0x80 { // a leading byte
			if utf8.FullRune(p[i:]) {
				return 0
			}
			return len(p) - i
		}
	}
	return 0
}
