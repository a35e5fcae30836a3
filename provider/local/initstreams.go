package local

import (
	"fmt"
	"os"

	"github.com/creack/pty"
)

// streams are the standard descriptors of a command init starts and its ends of them.
type streams struct {
	devNull                  *os.File
	files                    []uintptr // the command's fds 0, 1 and 2
	stdinW, stdoutR, stderrR *os.File
	ptmx                     *os.File   // the pty's master, for a TTY
	closeAfterStart          []*os.File // the command's ends
}

// openStreams makes a command's descriptors: /dev/null when detached, a new pty for a
// TTY, pipes otherwise (stdin only when the engine sends it).
func (in *initServer) openStreams(req ctlRequest) (*streams, error) {
	devNull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st := &streams{devNull: devNull, files: []uintptr{devNull.Fd(), devNull.Fd(), devNull.Fd()}}
	fail := func(err error) (*streams, error) {
		for _, f := range append([]*os.File{devNull, st.stdinW, st.stdoutR, st.stderrR}, st.closeAfterStart...) {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	switch {
	case req.Detach:
	case req.TTY:
		m, tty, err := pty.Open()
		if err != nil {
			return fail(fmt.Errorf("open a pty: %w", err))
		}
		cols, rows := req.Cols, req.Rows
		if cols == 0 || rows == 0 {
			cols, rows = 80, 24
		}
		_ = pty.Setsize(m, &pty.Winsize{Cols: cols, Rows: rows})
		st.ptmx, st.stdinW, st.stdoutR = m, m, m
		st.files = []uintptr{tty.Fd(), tty.Fd(), tty.Fd()}
		st.closeAfterStart = append(st.closeAfterStart, tty)
	default:
		if req.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			st.files[0], st.stdinW = r.Fd(), w
			st.closeAfterStart = append(st.closeAfterStart, r)
		}
		or, ow, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		st.stdoutR = or
		st.closeAfterStart = append(st.closeAfterStart, ow)
		er, ew, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		st.files[1], st.files[2], st.stderrR = ow.Fd(), ew.Fd(), er
		st.closeAfterStart = append(st.closeAfterStart, ew)
	}
	return st, nil
}
