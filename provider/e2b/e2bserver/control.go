package e2bserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// sandboxJSON is the Sandbox answer of create and connect.
func (s *Server) sandboxJSON(sb *sandbox) e2bwire.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e2bwire.Sandbox{TemplateID: sb.template, SandboxID: sb.id, ClientID: "local", EnvdVersion: EnvdVersion,
		EnvdAccessToken: sb.token, Domain: s.o.Domain}
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
	if withToken {
		d.EnvdAccessToken = sb.token
	}
	return d
}

// timeoutSeconds reads a request's timeout (seconds) with E2B's default of 15.
func timeoutSeconds(v *int) (time.Duration, error) {
	if v == nil {
		return 15 * time.Second, nil
	}
	if *v < 0 || *v > 86400*30 {
		return 0, errBadRequest("timeout must be between 0 and %d seconds", 86400*30)
	}
	return time.Duration(*v) * time.Second, nil
}

type newSandboxRequest struct {
	TemplateID string `json:"templateID"`
	Timeout    *int   `json:"timeout"`
	AutoPause  bool   `json:"autoPause"`
	// Secure false (explicitly) makes envd answer without an access token, as E2B does;
	// absent means secured here, the safer default for a server on a shared machine.
	Secure        *bool             `json:"secure"`
	AllowInternet *bool             `json:"allow_internet_access"`
	Metadata      map[string]string `json:"metadata"`
	EnvVars       map[string]string `json:"envVars"`
}

func validEnvName(k string) bool {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return false
	}
	return true
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) error {
	var req newSandboxRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.TemplateID == "" {
		return errBadRequest("templateID is required")
	}
	timeout, err := timeoutSeconds(req.Timeout)
	if err != nil {
		return err
	}
	for k, v := range req.EnvVars {
		if !validEnvName(k) || strings.ContainsRune(v, 0) {
			return errBadRequest("invalid environment variable %q", k)
		}
	}
	for k := range req.Metadata {
		if k == "" {
			return errBadRequest("metadata keys must not be empty")
		}
	}
	sb := &sandbox{id: "i" + newID(10), template: req.TemplateID, token: newID(16), metadata: req.Metadata,
		envVars: req.EnvVars, autoPause: req.AutoPause, procs: newProcTable(), forwards: map[int]*portfwd.Forwarder{},
		network: s.o.Egress && (req.AllowInternet == nil || *req.AllowInternet)}
	if req.Secure != nil && !*req.Secure {
		sb.token = ""
	}
	if sb.metadata == nil {
		sb.metadata = map[string]string{}
	}
	snap := ""
	if !s.templates[req.TemplateID] {
		snap = req.TemplateID
	}
	in, err := s.o.Engine.Create(r.Context(), s.spec(sb, snap))
	if errors.Is(err, engine.ErrNotFound) && snap != "" {
		return &apiError{http.StatusNotFound, "template '" + req.TemplateID + "' not found"}
	}
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	sb.engineID, sb.started = in.ID, s.o.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = s.o.Engine.Terminate(context.WithoutCancel(r.Context()), in.ID)
		return &apiError{http.StatusServiceUnavailable, "server is shutting down"}
	}
	s.sandboxes[sb.id] = sb
	s.setTimeoutLocked(sb, timeout)
	s.mu.Unlock()
	s.log.Info("sandbox created", "sandbox_id", sb.id, "engine_id", in.ID, "template", req.TemplateID)
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
	return nil
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
	states   map[string]bool
	metadata map[string]string
	limit    int
	after    string // the last id of the previous page
}

// parseListQuery validates a v1 or v2 list query.
func parseListQuery(q url.Values, v2 bool) (listFilter, error) {
	f := listFilter{states: map[string]bool{e2bwire.StateRunning: true}, limit: 100}
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
	if l := q.Get("limit"); l != "" && v2 {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return f, errBadRequest("limit must be between 1 and 100")
		}
		f.limit = n
	}
	if v2 {
		f.after = q.Get("nextToken")
	}
	return f, nil
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
		sort.Slice(all, func(i, j int) bool { return all[i].id < all[j].id })
		out := []e2bwire.SandboxDetail{}
		next := ""
		for _, sb := range all {
			if f.after != "" && sb.id <= f.after {
				continue
			}
			st, err := s.state(r.Context(), sb)
			if err != nil {
				continue // gone meanwhile
			}
			if !f.states[st] || !matches(sb.metadata, f.metadata) {
				continue
			}
			if len(out) == f.limit {
				next = out[len(out)-1].SandboxID
				break
			}
			out = append(out, s.detailJSON(sb, st, false))
		}
		if v2 && next != "" {
			w.Header().Set("X-Next-Token", next)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
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
	local, err := s.pause(r.Context(), sb)
	if err != nil {
		return err
	}
	if local {
		w.Header().Set("X-E2b-Local-Pause", "snapshot")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect is POST /sandboxes/{id}/connect (and the deprecated /resume, which answers
// 409 for a running sandbox).
func (s *Server) connect(deprecatedResume bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
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
		timeout, err := timeoutSeconds(body.Timeout)
		if err != nil {
			return err
		}
		if deprecatedResume {
			st, err := s.state(r.Context(), sb)
			if err != nil {
				return err
			}
			if st == e2bwire.StateRunning {
				return errConflict("sandbox " + sb.id + " is already running")
			}
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
	st, err := s.state(r.Context(), sb)
	if err != nil {
		return err
	}
	if st != e2bwire.StateRunning {
		return errConflict("sandbox " + sb.id + " is paused; connect it first")
	}
	s.mu.Lock()
	eid := sb.engineID
	s.mu.Unlock()
	id, err := s.o.Engine.Snapshot(r.Context(), eid)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
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
	addr, err := s.forward(sb, port)
	if err != nil {
		return fmt.Errorf("forward port %d: %w", port, err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"url": "http://" + addr})
	return nil
}
