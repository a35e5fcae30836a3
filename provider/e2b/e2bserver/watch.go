package e2bserver

// filesystem.WatchDir by polling: the watched tree is listed inside the sandbox (as
// every file call is, with the sandbox user's rights) every watchInterval and
// compared with the previous listing. Creations, writes (size or time changed),
// removals and mode changes are reported; a rename shows as a removal and a
// creation, and changes that come and go within one interval are not seen. Bounded:
// at most Options.MaxWatchers streams at once, maxWatched entries per watch.

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

const (
	watchInterval = 300 * time.Millisecond
	maxWatched    = 10000
)

// watchState is what a listing says about one entry.
type watchState struct {
	typ   string
	size  int64
	mtime time.Time
	mode  uint32
}

func (c envdCall) snapshot(r *http.Request, dir string, recursive bool) (map[string]watchState, error) {
	depth := 1
	if recursive {
		depth = 32
	}
	es, err := c.fs().list(r.Context(), dir, depth, maxWatched)
	if err != nil {
		return nil, err
	}
	out := make(map[string]watchState, len(es))
	for _, e := range es {
		ws := watchState{typ: e.Type, size: int64(e.Size), mode: e.Mode}
		if e.ModifiedTime != nil {
			ws.mtime = *e.ModifiedTime
		}
		out[e.Path] = ws
	}
	return out, nil
}

// watchEvents are the changes from old to cur, named relative to dir, sorted.
func watchEvents(dir string, old, cur map[string]watchState) []e2bwire.FilesystemEvent {
	var evs []e2bwire.FilesystemEvent
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, dir), "/") }
	for p, s := range cur {
		o, ok := old[p]
		switch {
		case !ok:
			evs = append(evs, e2bwire.FilesystemEvent{Name: rel(p), Type: e2bwire.EventCreate})
		case o.typ == e2bwire.FileTypeFile && (o.size != s.size || !o.mtime.Equal(s.mtime)):
			evs = append(evs, e2bwire.FilesystemEvent{Name: rel(p), Type: e2bwire.EventWrite})
		case o.mode != s.mode:
			evs = append(evs, e2bwire.FilesystemEvent{Name: rel(p), Type: e2bwire.EventChmod})
		}
	}
	for p := range old {
		if _, ok := cur[p]; !ok {
			evs = append(evs, e2bwire.FilesystemEvent{Name: rel(p), Type: e2bwire.EventRemove})
		}
	}
	slices.SortFunc(evs, func(a, b e2bwire.FilesystemEvent) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Type, b.Type))
	})
	return evs
}

func (c envdCall) watchStream(w http.ResponseWriter, r *http.Request) {
	st := newStream(w)
	var req e2bwire.WatchDirRequest
	if ce := readStreamRequest(w, r, &req); ce != nil {
		st.end(ce)
		return
	}
	select {
	case c.s.watchers <- struct{}{}:
		defer func() { <-c.s.watchers }()
	default:
		st.end(&e2bwire.ConnectError{Code: "resource_exhausted", Message: "too many directory watchers on the local E2B server"})
		return
	}
	dir := resolve(req.Path)
	old, err := c.snapshot(r, dir, req.Recursive)
	if err != nil {
		st.end(asConnect(err))
		return
	}
	if err := st.sendMsg(e2bwire.WatchDirResponse{Start: &struct{}{}}); err != nil {
		return
	}
	deadline, keepalive, stop := callTimers(r)
	defer stop()
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			cur, err := c.snapshot(r, dir, req.Recursive)
			if err != nil {
				if r.Context().Err() == nil {
					st.end(asConnect(err))
				}
				return
			}
			for _, ev := range watchEvents(dir, old, cur) {
				if err := st.sendMsg(e2bwire.WatchDirResponse{Filesystem: &ev}); err != nil {
					return
				}
			}
			old = cur
		case <-keepalive:
			if err := st.sendMsg(e2bwire.WatchDirResponse{Keepalive: &struct{}{}}); err != nil {
				return
			}
		case <-deadline:
			st.end(nil)
			return
		case <-r.Context().Done():
			return
		case <-c.s.base.Done(): // the server is closing
			st.end(&e2bwire.ConnectError{Code: e2bwire.CodeUnavailable, Message: "the local E2B server is shutting down"})
			return
		}
	}
}
