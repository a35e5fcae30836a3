// Package procfs reads the fields of Linux's /proc/<pid>/stat that the
// sidecar acts on: the service manager (internal/services) tells a recycled
// pid apart by its start time and finds a run's processes by group, the
// terminal (internal/terminal) finds a shell's session, and the port scanner
// (internal/ports) names a socket's process and group.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Stat is what the sidecar reads of /proc/<pid>/stat.
type Stat struct {
	// Comm is the process name (field 2), as the kernel keeps it.
	Comm string
	// State is R, S, D, Z, T, ... (field 3).
	State byte
	// PPID, PGID and Session are fields 4, 5 and 6.
	PPID, PGID, Session int
	// Start is field 22, the start time in clock ticks after boot; with the
	// pid it names one process, whatever reuses the pid later.
	Start uint64
}

// ParseStat parses the contents of /proc/<pid>/stat. The name (field 2) is
// in parentheses and may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, errors.New("parse stat: no command name")
	}
	st := Stat{Comm: string(b[open+1 : end])}
	f := bytes.Fields(b[end+1:])
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, errors.New("parse stat: too few fields")
	}
	st.State = f[0][0]
	ints := []struct {
		name string
		dst  *int
		v    []byte
	}{{"ppid", &st.PPID, f[1]}, {"pgid", &st.PGID, f[2]}, {"session", &st.Session, f[3]}}
	for _, x := range ints {
		n, err := strconv.Atoi(string(x.v))
		if err != nil {
			return Stat{}, fmt.Errorf("parse stat %s: %w", x.name, err)
		}
		*x.dst = n
	}
	var err error
	if st.Start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse stat starttime: %w", err)
	}
	return st, nil
}

// ReadStat reads and parses /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}
