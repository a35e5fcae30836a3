package api

import (
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// debugStats answers GET /api/debug/stats: what the sidecar holds right now.
func (s *Server) debugStats(w http.ResponseWriter, r *http.Request) error {
	st := apitype.DebugStats{
		Goroutines: runtime.NumGoroutine(),
		OpenFDs:    openFDs(),
		FDLimit:    -1,
		RSSBytes:   rssBytes(),
		Streams:    s.streams.Load(),
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		st.FDLimit = int(min(rl.Cur, 1<<31-1))
	}
	if s.opts.Terminal != nil {
		st.TerminalSessions = len(s.opts.Terminal.Sessions())
	}
	if s.opts.Services != nil {
		list := s.opts.Services.List()
		st.Services = len(list)
		for _, svc := range list {
			if svc.Status == "running" {
				st.ServicesRunning++
			}
		}
	}
	if cl := s.conns.Load(); cl != nil {
		st.Connections, st.AuthenticatedConnections, st.ShedConnections = cl.stats()
		st.ConnectionLimit = cl.limit()
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// openFDs counts the entries of /proc/self/fd, less the one reading it.
func openFDs() int {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names) - 1
}

// rssBytes reads the resident set size from /proc/self/statm.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return -1
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize())
}
