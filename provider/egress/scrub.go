package egress

// The scrub of responses: every occurrence of a secret's value becomes its placeholder
// (of the same length) before a byte reaches the sandbox. A body is scrubbed as it
// streams: the last len(value)-1 bytes of what has arrived are held back until more
// arrive, so a value split across reads is still whole when it is looked for. A
// replacement is repeated until nothing matches, so that no value can be assembled
// from a placeholder and the bytes around it.

import (
	"bytes"
	"errors"
	"io"
	"strings"
)

// errScrub ends a response whose value would not go away (never seen in practice: a
// replacement that keeps making a value again).
var errScrub = errors.New("the response keeps spelling a secret's value; cut off")

// maxScrubPasses bounds the replacement passes over a buffer.
const maxScrubPasses = 16

type scrubber struct {
	olds, news [][]byte
	keep       int
}

// scrubber is the scrub of every secret's value (nil without secrets).
func (s *Secrets) scrubber() *scrubber {
	if s == nil {
		return nil
	}
	sc := &scrubber{}
	for _, e := range s.list {
		sc.olds = append(sc.olds, []byte(e.value))
		sc.news = append(sc.news, []byte(e.placeholder))
		sc.keep = max(sc.keep, len(e.value)-1)
	}
	return sc
}

// replace scrubs b in place; false when it found no fixed point.
func (sc *scrubber) replace(b []byte) bool {
	for range maxScrubPasses {
		changed := false
		for i, old := range sc.olds {
			for at := 0; ; {
				j := bytes.Index(b[at:], old)
				if j < 0 {
					break
				}
				copy(b[at+j:], sc.news[i])
				at += j + 1
				changed = true
			}
		}
		if !changed {
			return true
		}
	}
	return false
}

// String scrubs one header value; false when it found no fixed point.
func (sc *scrubber) String(v string) (string, bool) {
	for _, old := range sc.olds {
		if strings.Contains(v, string(old)) {
			b := []byte(v)
			ok := sc.replace(b)
			return string(b), ok
		}
	}
	return v, true
}

// Reader scrubs r as it is read.
func (sc *scrubber) Reader(r io.Reader) io.Reader {
	return &scrubReader{sc: sc, r: r, buf: make([]byte, 32<<10)}
}

type scrubReader struct {
	sc  *scrubber
	r   io.Reader
	buf []byte
	// pend[:ready] is scrubbed and final; pend[ready:] is held back.
	pend  []byte
	ready int
	err   error
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for {
		if s.ready > 0 {
			n := copy(p, s.pend[:s.ready])
			s.pend = s.pend[:copy(s.pend, s.pend[n:])]
			s.ready -= n
			return n, nil
		}
		if s.err != nil {
			return 0, s.err
		}
		n, err := s.r.Read(s.buf)
		s.pend = append(s.pend, s.buf[:n]...)
		if !s.sc.replace(s.pend) {
			s.pend, s.err = nil, errScrub
			return 0, s.err
		}
		if err != nil {
			s.err, s.ready = err, len(s.pend)
		} else {
			s.ready = max(0, len(s.pend)-s.sc.keep)
		}
	}
}

// Close closes the underlying reader when it is a Closer.
func (s *scrubReader) Close() error {
	if c, ok := s.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
