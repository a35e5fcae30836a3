package logtail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// tailBlock is how much Tail reads at a time, walking back from the end.
const tailBlock = 64 << 10

// Tail returns the last n lines of name's log, reading back into <name>.log.1
// and <name>.log.2 when the current file holds fewer. A final newline ends the
// last line and adds no empty one. At most MaxTailBytes are read, so a line
// longer than that is cut at its start. The error wraps fs.ErrInvalid for a bad
// name and fs.ErrNotExist when there is no log.
func (d *Dir) Tail(name string, n int) ([]string, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	// Open the newest first: a rotation while opening can then only show a file
	// twice, and the duplicate is skipped.
	var files []*os.File
	var infos []os.FileInfo
	defer func() {
		for _, fl := range files {
			_ = fl.Close()
		}
	}()
	for gen := 0; gen <= 2; gen++ {
		fl, err := openLog(d.path(name, gen))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open log of %q: %w", name, err)
		}
		fi, err := fl.Stat()
		if err != nil || seen(infos, fi) {
			_ = fl.Close()
			continue
		}
		files, infos = append(files, fl), append(infos, fi)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("open log of %q: %w", name, fs.ErrNotExist)
	}
	lines := []string{}
	if n <= 0 {
		return lines, nil
	}

	// Walk back block by block until n+1 newlines guarantee n whole lines.
	var blocks [][]byte // newest first
	total, newlines := 0, 0
read:
	for i, fl := range files {
		end := infos[i].Size()
		for end > 0 {
			if total >= MaxTailBytes {
				break read
			}
			size := min(int64(tailBlock), end, int64(MaxTailBytes-total))
			b := make([]byte, size)
			k, err := fl.ReadAt(b, end-size)
			if err != nil && err != io.EOF {
				return nil, fmt.Errorf("read log of %q: %w", name, err)
			}
			b = b[:k]
			end -= size
			blocks = append(blocks, b)
			total += len(b)
			newlines += bytes.Count(b, []byte{'\n'})
			if newlines > n {
				break read
			}
		}
	}
	var sb strings.Builder
	sb.Grow(total)
	for i := len(blocks) - 1; i >= 0; i-- {
		sb.Write(blocks[i])
	}
	if total == 0 {
		return lines, nil
	}
	lines = strings.Split(strings.TrimSuffix(sb.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}

func seen(infos []os.FileInfo, fi os.FileInfo) bool {
	for _, o := range infos {
		if os.SameFile(o, fi) {
			return true
		}
	}
	return false
}
