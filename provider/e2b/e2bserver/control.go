package e2bserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// sandboxJSON is the Sandbox answer of create and connect.
func (s *Server) sandboxJSON(sb *sandbox) e2bwire.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e2bwire.Sandbox{TemplateID: sb.template, SandboxID: sb.id, ClientID: "local", EnvdVersion: EnvdVersion,
		EnvdAccessToken: sb.token, Domain: s.o.Domain, TrafficAccessToken: sb.traffic}
}

func (s *Server) detailJSON(sb *sandbox, state string, withToken bool) e2bwire.SandboxDetail {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := e2bwire.SandboxDetail{TemplateID: sb.template, SandboxID: sb.id, ClientID: "local", StartedAt: sb.started.UTC(),
		EndAt: sb.end.UTC(), EnvdVersion: EnvdVersion, Domain: s.o.Domain, CPUCount: 1, MemoryMB: 512, DiskSizeMB: 1024,
		Metadata: sb.metadata, State: state}
	if d.Metadata == nil {
		d.Metadata = map[string]string{}
	}
	for _, v := range sb.volumes {
		d.VolumeMounts = append(d.VolumeMounts, e2bwire.VolumeMount{Name: v.Name, Path: v.Target})
	}
	if withToken {
		d.EnvdAccessToken = sb.token
	}
	return d
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.lookup(r.PathValue("id"))
	if !ok {
		return errNotFound(r.PathValue("id"))
	}
	st, err := s.state(r.Context(), sb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.detailJSON(sb, st, true))
	return nil
}

// listFilter is a parsed list query.
type listFilter struct {
	states       map[string]bool
	metadata     map[string]string
	template     string
	startedAfter time.Time
	asc          bool // v2's order=asc; v2 lists newest first by default
	limit        int
	after        string // the last id of the previous page
}

// parseListQuery validates a v1 or v2 list query.
func parseListQuery(q url.Values, v2 bool) (listFilter, error) {
	f := listFilter{states: map[string]bool{e2bwire.StateRunning: true}, limit: 100, asc: !v2}
	if v2 {
		f.states[e2bwire.StatePaused] = true
	}
	if st := q.Get("state"); st != "" && v2 {
		f.states = map[string]bool{}
		for _, x := range strings.Split(st, ",") {
			if x != e2bwire.StateRunning && x != e2bwire.StatePaused {
				return f, errBadRequest("invalid state %q", x)
			}
			f.states[x] = true
		}
	}
	if m := q.Get("metadata"); m != "" {
		mv, err := url.ParseQuery(m)
		if err != nil {
			return f, errBadRequest("invalid metadata query: %v", err)
		}
		f.metadata = map[string]string{}
		for k := range mv {
			f.metadata[k] = mv.Get(k)
		}
	}
	if !v2 {
		return f, nil
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return f, errBadRequest("limit must be between 1 and 100")
		}
		f.limit = n
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		f.asc = true
	default:
		return f, errBadRequest("order must be asc or desc")
	}
	if sa := q.Get("startedAfter"); sa != "" {
		t, err := time.Parse(time.RFC3339Nano, sa)
		if err != nil {
			return f, errBadRequest("invalid startedAfter %q: want an RFC 3339 time", sa)
		}
		f.startedAfter = t
	}
	f.template = q.Get("template")
	f.after = q.Get("nextToken")
	return f, nil
}

// keep reports whether sb in state st passes the filter.
func (f listFilter) keep(sb *sandbox, st string) bool {
	return f.states[st] && matches(sb.metadata, f.metadata) && (f.template == "" || sb.template == f.template) &&
		!sb.started.Before(f.startedAfter)
}

func (s *Server) list(v2 bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		f, err := parseListQuery(r.URL.Query(), v2)
		if err != nil {
			return err
		}
		s.mu.Lock()
		all := make([]*sandbox, 0, len(s.sandboxes))
		for _, sb := range s.sandboxes {
			all = append(all, sb)
		}
		s.mu.Unlock()
		// Start time, then id: a total order, and the page token is the last
		// entry's place in it, so it stays valid when that sandbox is gone.
		order := func(at time.Time, id string, b *sandbox) int {
			c := at.Compare(b.started)
			if c == 0 {
				c = strings.Compare(id, b.id)
			}
			if !f.asc {
				c = -c
			}
			return c
		}
		slices.SortFunc(all, func(a, b *sandbox) int { return order(a.started, a.id, b) })
		if f.after != "" {
			at, id, err := parseCursor(f.after)
			if err != nil {
				return err
			}
			i := 0
			for i < len(all) && order(at, id, all[i]) >= 0 {
				i++
			}
			all = all[i:]
		}
		out := []e2bwire.SandboxDetail{}
		next := ""
		var last *sandbox
		for _, sb := range all {
			st, err := s.state(r.Context(), sb)
			if err != nil || !f.keep(sb, st) {
				continue // gone meanwhile, or filtered out
			}
			if len(out) == f.limit {
				next = cursor(last)
				break
			}
			last = sb
			out = append(out, s.detailJSON(sb, st, false))
		}
		if v2 && next != "" {
			w.Header().Set("X-Next-Token", next)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// cursor is a page token: the start time and id of a page's last sandbox.
func cursor(sb *sandbox) string {
	return strconv.FormatInt(sb.started.UnixNano(), 10) + "." + sb.id
}

func parseCursor(tok string) (time.Time, string, error) {
	ns, id, ok := strings.Cut(tok, ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", errBadRequest("invalid nextToken %q", tok)
	}
	return time.Unix(0, n), id, nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (s *Server) killHandler(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.lookup(r.PathValue("id"))
	if !ok {
		return errNotFound(r.PathValue("id"))
	}
	if err := s.kill(r.Context(), sb); err != nil && !errors.Is(err, engine.ErrNotFound) {
		return fmt.Errorf("kill sandbox: %w", err)
	}
	s.log.Info("sandbox killed", "sandbox_id", sb.id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) pauseHandler(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.lookup(r.PathValue("id"))
	if !ok {
		return errNotFound(r.PathValue("id"))
	}
	var body struct{}
	if err := decode(r, &body); err != nil {
		return err
	}
	local, err := s.pause(r.Context(), sb, false)
	if err != nil {
		return err
	}
	if local {
		w.Header().Set("X-E2b-Local-Pause", "snapshot")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connectKind is which of the three connect routes a request came by.
type connectKind int

const (
	connectV1        connectKind = iota // POST /sandboxes/{id}/connect
	connectV2                           // POST /v2/sandboxes/{id}/connect
	deprecatedResume                    // POST /sandboxes/{id}/resume: 409 for a running sandbox
)

// connect resumes a paused sandbox, or extends a running one's lifetime.
func (s *Server) connect(kind connectKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		sb, ok := s.lookup(r.PathValue("id"))
		if !ok {
			return errNotFound(r.PathValue("id"))
		}
		var body struct {
			Timeout *int  `json:"timeout"`
			Memory  *bool `json:"memory"` // v2
		}
		if err := decode(r, &body); err != nil {
			return err
		}
		if kind == connectV2 && body.Timeout == nil {
			t := 300 // ConnectSandboxV2's default
			body.Timeout = &t
		}
		timeout, err := timeoutSeconds(body.Timeout)
		if err != nil {
			return err
		}
		st, err := s.state(r.Context(), sb)
		if err != nil {
			return err
		}
		if kind == deprecatedResume && st == e2bwire.StateRunning {
			return errConflict("sandbox " + sb.id + " is already running")
		}
		if kind == connectV2 && body.Memory != nil && !*body.Memory && st == e2bwire.StatePaused && !s.stoppedByDisk(sb) {
			return errBadRequest("memory false (resume from disk only) is not supported by the local E2B server for a sandbox paused with its memory")
		}
		resumed, err := s.resume(r.Context(), sb, timeout)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if resumed {
			status = http.StatusCreated
		}
		writeJSON(w, status, s.sandboxJSON(sb))
		return nil
	}
}

// stoppedByDisk reports whether sb is paused by snapshot and stop (its memory gone).
func (s *Server) stoppedByDisk(sb *sandbox) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sb.stopped
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.lookup(r.PathValue("id"))
	if !ok {
		return errNotFound(r.PathValue("id"))
	}
	var body struct {
		Timeout *int `json:"timeout"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Timeout == nil {
		return errBadRequest("timeout is required")
	}
	d, err := timeoutSeconds(body.Timeout)
	if err != nil {
		return err
	}
	if _, err := s.state(r.Context(), sb); err != nil {
		return err
	}
	s.mu.Lock()
	s.setTimeoutLocked(sb, d)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// snapshotRunning snapshots a running sandbox's engine sandbox; a paused one is a
// conflict (E2B snapshots and forks only running sandboxes).
func (s *Server) snapshotRunning(ctx context.Context, sb *sandbox) (string, error) {
	st, err := s.state(ctx, sb)
	if err != nil {
		return "", err
	}
	if st != e2bwire.StateRunning {
		return "", errConflict("sandbox " + sb.id + " is paused; connect it first")
	}
	s.mu.Lock()
	eid := sb.engineID
	s.mu.Unlock()
	id, err := s.o.Engine.Snapshot(ctx, eid)
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	return id, nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.lookup(r.PathValue("id"))
	if !ok {
		return errNotFound(r.PathValue("id"))
	}
	var body struct {
		Name string `json:"name"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	id, err := s.snapshotRunning(r.Context(), sb)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.snapshots[id] = snapshot{ID: id, SandboxID: sb.id}
	s.mu.Unlock()
	names := []string{}
	if body.Name != "" {
		names = append(names, body.Name)
	}
	writeJSON(w, http.StatusCreated, e2bwire.SnapshotInfo{SnapshotID: id, Names: names})
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	want := r.URL.Query().Get("sandboxID")
	s.mu.Lock()
	out := []e2bwire.SnapshotInfo{}
	for _, sn := range s.snapshots {
		if want == "" || sn.SandboxID == want {
			out = append(out, e2bwire.SnapshotInfo{SnapshotID: sn.ID, Names: []string{}})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b e2bwire.SnapshotInfo) int { return strings.Compare(a.SnapshotID, b.SnapshotID) })
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ports is the extension route GET /sandboxes/{id}/ports/{port}: a loopback URL
// forwarding to that port inside the sandbox.
func (s *Server) ports(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.lookup(r.PathValue("id"))
	if !ok {
		return errNotFound(r.PathValue("id"))
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return errBadRequest("invalid port %q", r.PathValue("port"))
	}
	st, err := s.state(r.Context(), sb)
	if err != nil {
		return err
	}
	if st != e2bwire.StateRunning {
		return errConflict("sandbox " + sb.id + " is paused")
	}
	s.mu.Lock()
	private := sb.traffic != ""
	s.mu.Unlock()
	if private {
		// A plain loopback forward cannot ask for the traffic token: only the
		// port host, which checks it, reaches such a sandbox's ports.
		return &apiError{http.StatusForbidden, "sandbox " + sb.id + " was created with allowPublicTraffic false: " +
			"reach its ports through its port host with the " + headerTraffic + " header"}
	}
	addr, err := s.forward(sb, port)
	if err != nil {
		return fmt.Errorf("forward port %d: %w", port, err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"url": "http://" + addr})
	return nil
}
