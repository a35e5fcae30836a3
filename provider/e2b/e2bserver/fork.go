package e2bserver

import (
	"context"
	"fmt"
	"maps"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
)

// maxForks bounds one fork request's count.
const maxForks = 16

// forkHandler is POST /sandboxes/{id}/fork: the sandbox is snapshotted once and
// count new sandboxes start from the snapshot, with its template, metadata,
// environment and network. E2B forks memory too; here the snapshot is the engine's,
// the filesystem, so running processes are not carried over (docs/e2b.md).
func (s *Server) forkHandler(w http.ResponseWriter, r *http.Request) error {
	sb, ok := s.lookup(r.PathValue("id"))
	if !ok {
		return errNotFound(r.PathValue("id"))
	}
	var body struct {
		Timeout *int `json:"timeout"`
		Count   *int `json:"count"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > maxForks {
		return errBadRequest("count must be between 1 and %d", maxForks)
	}
	timeout, err := timeoutSeconds(body.Timeout) // SandboxForkRequest's default is 15 s, as v1's
	if err != nil {
		return err
	}
	snap, err := s.snapshotRunning(r.Context(), sb)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	out := make([]e2bwire.ForkResult, 0, count)
	for range count {
		s.mu.Lock()
		child := &sandbox{id: "i" + newID(10), template: sb.template, token: newID(16), metadata: maps.Clone(sb.metadata),
			envVars: maps.Clone(sb.envVars), network: sb.network, egressHosts: sb.egressHosts, traffic: trafficToken(sb.traffic), procs: newProcTable(), forwards: map[int]*portfwd.Forwarder{},
			volumes: sb.volumes}
		s.mu.Unlock()
		in, err := s.o.Engine.Create(r.Context(), s.spec(child, snap))
		if err != nil {
			s.log.Warn("fork", "sandbox_id", sb.id, "err", err)
			out = append(out, e2bwire.ForkResult{Error: &e2bwire.APIError{Code: 500, Message: "start fork: " + err.Error()}})
			continue
		}
		child.engineID, child.started = in.ID, s.o.Now()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = s.o.Engine.Terminate(context.WithoutCancel(r.Context()), in.ID)
			return &apiError{http.StatusServiceUnavailable, "server is shutting down"}
		}
		s.sandboxes[child.id] = child
		s.setTimeoutLocked(child, timeout)
		s.mu.Unlock()
		j := s.sandboxJSON(child)
		out = append(out, e2bwire.ForkResult{Sandbox: &j})
		s.log.Info("sandbox forked", "sandbox_id", sb.id, "fork_id", child.id)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// trafficToken is a fork's traffic token: a fresh one when its parent had one.
func trafficToken(parent string) string {
	if parent == "" {
		return ""
	}
	return newID(16)
}
