package gitbundle

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Limits bound the pack of a bundle before git sees it. A pack's entries
// declare their inflated sizes (a delta's result size is in the first bytes of
// its inflated data), so a zip bomb is refused on those declarations, and
// ScanPack never inflates more than it was told: an entry that inflates past
// its declaration is refused too.
type Limits struct {
	// MaxObjectBytes caps one object's inflated size (a delta: its result).
	MaxObjectBytes int64
	// MaxInflatedBytes caps the sum of every entry's inflated size plus
	// every delta's result: the work index-pack would do.
	MaxInflatedBytes int64
	// MaxObjects caps the entries of the pack.
	MaxObjects uint32
}

// PackStats is what ScanPack saw.
type PackStats struct {
	Objects  uint32
	Deltas   uint32
	Inflated int64 // the sum MaxInflatedBytes bounds
	Largest  int64 // the largest object (or delta result)
}

// Pack entry types (git's object_type).
const (
	objCommit   = 1
	objTree     = 2
	objBlob     = 3
	objTag      = 4
	objOfsDelta = 6
	objRefDelta = 7
)

// LimitError says a pack went past one of its Limits.
type LimitError struct {
	What  string // "object", "inflated", "objects"
	Size  int64
	Limit int64
}

func (e *LimitError) Error() string {
	switch e.What {
	case "object":
		return fmt.Sprintf("an object of %d bytes, over the %d-byte cap", e.Size, e.Limit)
	case "objects":
		return fmt.Sprintf("%d objects, over the cap of %d", e.Size, e.Limit)
	}
	return fmt.Sprintf("the pack inflates to more than %d bytes (cap %d)", e.Size, e.Limit)
}

// ScanPack reads the pack that follows a bundle's header and checks every
// entry's declared size against lim, inflating each entry only as far as it
// declared (that is how an entry's end is found). hashLen is 20 (sha1) or 32
// (sha256). It does not check hashes: index-pack does.
func ScanPack(r io.Reader, hashLen int, lim Limits) (PackStats, error) {
	var st PackStats
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return st, errors.New("pack: truncated header")
	}
	if string(hdr[:4]) != "PACK" {
		return st, errors.New("pack: bad signature")
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != 2 && v != 3 {
		return st, fmt.Errorf("pack: version %d", v)
	}
	n := binary.BigEndian.Uint32(hdr[8:12])
	if n > lim.MaxObjects {
		return st, &LimitError{What: "objects", Size: int64(n), Limit: int64(lim.MaxObjects)}
	}
	var zr io.ReadCloser
	scratch := make([]byte, 32<<10)
	for i := uint32(0); i < n; i++ {
		typ, size, err := entryHeader(br)
		if err != nil {
			return st, err
		}
		if err := skipDeltaBase(br, typ, hashLen); err != nil {
			return st, err
		}
		// A delta's own data is small; its result is what counts, read below.
		if typ < objOfsDelta && size > lim.MaxObjectBytes {
			return st, &LimitError{What: "object", Size: size, Limit: lim.MaxObjectBytes}
		}
		if st.Inflated += size; st.Inflated > lim.MaxInflatedBytes {
			return st, &LimitError{What: "inflated", Size: st.Inflated, Limit: lim.MaxInflatedBytes}
		}
		if zr == nil {
			zr, err = zlib.NewReader(br)
		} else {
			err = zr.(zlib.Resetter).Reset(br, nil)
		}
		if err != nil {
			return st, fmt.Errorf("pack: entry %d: %w", i, err)
		}
		body := &exactReader{r: zr, left: size, buf: scratch}
		result := size
		if typ >= objOfsDelta {
			st.Deltas++
			if result, err = deltaResultSize(body); err != nil {
				return st, fmt.Errorf("pack: entry %d: %w", i, err)
			}
			if result > lim.MaxObjectBytes {
				return st, &LimitError{What: "object", Size: result, Limit: lim.MaxObjectBytes}
			}
			if st.Inflated += result; st.Inflated > lim.MaxInflatedBytes {
				return st, &LimitError{What: "inflated", Size: st.Inflated, Limit: lim.MaxInflatedBytes}
			}
		}
		st.Largest = max(st.Largest, result)
		if err := body.finish(); err != nil {
			return st, fmt.Errorf("pack: entry %d: %w", i, err)
		}
		st.Objects++
	}
	return st, nil
}

// entryHeader reads an entry's type and declared (inflated) size.
func entryHeader(br *bufio.Reader) (typ int, size int64, err error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, 0, errors.New("pack: truncated entry")
	}
	typ = int(c>>4) & 7
	size = int64(c & 0x0f)
	shift := 4
	for c&0x80 != 0 {
		if shift > 56 {
			return 0, 0, errors.New("pack: entry size overflows")
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, 0, errors.New("pack: truncated entry")
		}
		size |= int64(c&0x7f) << shift
		shift += 7
	}
	switch typ {
	case objCommit, objTree, objBlob, objTag, objOfsDelta, objRefDelta:
		return typ, size, nil
	}
	return 0, 0, fmt.Errorf("pack: entry type %d", typ)
}

// skipDeltaBase reads past a delta's base reference.
func skipDeltaBase(br *bufio.Reader, typ, hashLen int) error {
	switch typ {
	case objRefDelta:
		if _, err := br.Discard(hashLen); err != nil {
			return errors.New("pack: truncated delta base")
		}
	case objOfsDelta:
		for i := 0; ; i++ {
			c, err := br.ReadByte()
			if err != nil || i > 9 {
				return errors.New("pack: bad delta offset")
			}
			if c&0x80 == 0 {
				break
			}
		}
	}
	return nil
}

// deltaResultSize reads a delta's two leading varints and returns the second,
// the size of the object the delta makes.
func deltaResultSize(r io.ByteReader) (int64, error) {
	var size int64
	for range 2 {
		size = 0
		for shift := 0; ; shift += 7 {
			if shift > 56 {
				return 0, errors.New("delta size overflows")
			}
			c, err := r.ReadByte()
			if err != nil {
				return 0, errors.New("truncated delta")
			}
			size |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				break
			}
		}
	}
	return size, nil
}

// exactReader reads an entry's inflated data, which must be exactly left bytes.
type exactReader struct {
	r    io.Reader
	left int64
	one  [1]byte
	buf  []byte // scratch, shared by the entries
}

func (e *exactReader) ReadByte() (byte, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	if _, err := io.ReadFull(e.r, e.one[:]); err != nil {
		return 0, err
	}
	e.left--
	return e.one[0], nil
}

// finish inflates the rest, refusing an entry longer or shorter than declared,
// and reads the zlib trailer.
func (e *exactReader) finish() error {
	for e.left > 0 {
		n, err := e.r.Read(e.buf[:min(int64(len(e.buf)), e.left)])
		e.left -= int64(n)
		if err == io.EOF && e.left > 0 {
			return errors.New("entry shorter than declared")
		}
		if err != nil && err != io.EOF {
			return err
		}
	}
	n, err := e.r.Read(e.one[:])
	if n > 0 {
		return errors.New("entry longer than declared")
	}
	if err != io.EOF {
		if err == nil {
			err = errors.New("entry does not end")
		}
		return err
	}
	return nil
}
