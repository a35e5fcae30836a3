package modalserver

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// --- sandbox lookup -------------------------------------------------------------------

// lookup finds a sandbox by id, reloading the engine's list when the server does not
// know it (after a restart), and refreshes whether it is still running.
func (s *Server) lookup(ctx context.Context, id string) (*sandbox, error) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		if err := s.reload(ctx); err != nil {
			return nil, err
		}
		s.mu.Lock()
		sb = s.sandboxes[id]
		s.mu.Unlock()
		if sb == nil {
			return nil, status.Errorf(codes.NotFound, "Sandbox '%s' not found", id)
		}
	}
	s.refresh(ctx, sb)
	return sb, nil
}

func (s *Server) lookupTask(ctx context.Context, taskID string) (*sandbox, error) {
	s.mu.Lock()
	id, ok := s.tasks[taskID]
	s.mu.Unlock()
	if !ok {
		id = "sb-" + strings.TrimPrefix(taskID, "ta-")
	}
	sb, err := s.lookup(ctx, id)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "Task '%s' not found", taskID)
	}
	return sb, nil
}

// refresh asks the engine whether a running sandbox still is; one that ended is
// finished (TIMEOUT when its timeout ended it) and removed from the engine.
func (s *Server) refresh(ctx context.Context, sb *sandbox) {
	s.mu.Lock()
	done, eid := sb.result != nil, sb.engineID
	s.mu.Unlock()
	if done || eid == "" {
		return
	}
	info, err := s.o.Engine.Get(ctx, eid)
	if err != nil && !errors.Is(err, engine.ErrNotFound) || err == nil && info.State != engine.StateDead {
		return
	}
	r := terminatedResult()
	if s.timedOut(sb) {
		r = timeoutResult()
	}
	s.finish(sb, r)
	s.endSandbox(sb)
}

// reload adds the engine's sandboxes that carry this server's labels.
func (s *Server) reload(ctx context.Context) error {
	infos, err := s.o.Engine.List(ctx)
	if err != nil {
		return engineError("Sandbox list", err)
	}
	var found []*sandbox
	defer func() {
		// Outside s.mu: a dead one is finished and removed, a live one watched.
		for _, sb := range found {
			s.refresh(ctx, sb)
			s.watchDeadline(sb)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, info := range infos {
		id := info.Labels[labelID]
		if id == "" || s.sandboxes[id] != nil {
			continue
		}
		sb := newSandbox(&sandbox{id: id, taskID: info.Labels[labelTask], engineID: info.ID, appID: info.Labels[labelApp],
			name: info.Labels[labelName], imageID: info.Labels[labelImage], created: info.Created})
		if ms, err := strconv.ParseInt(info.Labels[labelDeadline], 10, 64); err == nil {
			sb.deadline = time.UnixMilli(ms)
		}
		for _, p := range strings.Split(info.Labels[labelPorts], ",") {
			n, err := strconv.Atoi(strings.TrimSuffix(p, "u"))
			if err == nil {
				sb.ports = append(sb.ports, pb.PortSpec_builder{Port: uint32(n), Unencrypted: strings.HasSuffix(p, "u")}.Build())
			}
		}
		s.sandboxes[id] = sb
		s.tasks[sb.taskID] = id
		found = append(found, sb)
	}
	return nil
}
