package terminal

import "unicode/utf8"

// ring keeps the last len(buf) bytes of a session's output and counts every
// byte ever written, so a position in the output is an absolute offset that
// stays valid across reconnects.
type ring struct {
	buf []byte
	// end is the absolute offset one past the last byte written.
	end int64
}

func newRing(size int) *ring { return &ring{buf: make([]byte, size)} }

// start is the absolute offset of the oldest byte still kept.
func (r *ring) start() int64 { return max(0, r.end-int64(len(r.buf))) }

// write appends p, overwriting the oldest bytes.
func (r *ring) write(p []byte) {
	size := int64(len(r.buf))
	if int64(len(p)) > size {
		r.end += int64(len(p)) - size
		p = p[len(p)-int(size):]
	}
	for len(p) > 0 {
		i := int(r.end % size)
		n := copy(r.buf[i:], p)
		p = p[n:]
		r.end += int64(n)
	}
}

// at returns the byte at absolute offset off, which must be kept.
func (r *ring) at(off int64) byte { return r.buf[off%int64(len(r.buf))] }

// boundary returns the first offset at or after off (at most 3 bytes later)
// that does not fall inside a UTF-8 sequence. It is used where the ring has
// overwritten the start of a character.
func (r *ring) boundary(off int64) int64 {
	for i := 0; i < utf8MaxContinuation && off < r.end && isContinuation(r.at(off)); i++ {
		off++
	}
	return off
}

// read copies the bytes from absolute offset off (kept, at most end) into dst
// and returns how many it copied. When dst cannot take everything it stops
// before a UTF-8 sequence that would be cut.
func (r *ring) read(dst []byte, off int64) int {
	avail := r.end - off
	n := int(min(int64(len(dst)), avail))
	size := int64(len(r.buf))
	copied := 0
	for copied < n {
		i := int((off + int64(copied)) % size)
		copied += copy(dst[copied:n], r.buf[i:])
	}
	if int64(n) < avail {
		n = completePrefix(dst[:n])
	}
	return n
}

const utf8MaxContinuation = 3

func isContinuation(b byte) bool { return b&0xC0 == 0x80 }

// completePrefix returns the length of the longest prefix of p that does not
// end inside a UTF-8 sequence: an incomplete multi-byte character at the end
// is left out. Invalid bytes are not held back, so binary output flows.
func completePrefix(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if isContinuation(p[i]) {
			continue
		}
		if !utf8.FullRune(p[i:]) {
			return i
		}
		break
	}
	return len(p)
}
