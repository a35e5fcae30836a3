package modalserver

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// --- sandbox calls ---------------------------------------------------------------------

func (s *Server) SandboxGetTaskId(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case sb.engineID != "":
		// It had its task, even if it has ended since (a command that exits at once):
		// the SDKs take a result here as "finished before it was scheduled" and fail
		// the create.
		return pb.SandboxGetTaskIdResponse_builder{TaskId: proto.String(sb.taskID)}.Build(), nil
	case sb.result != nil:
		return pb.SandboxGetTaskIdResponse_builder{TaskResult: sb.result}.Build(), nil
	}
	return pb.SandboxGetTaskIdResponse_builder{}.Build(), nil // still being created
}

func (s *Server) SandboxGetTaskIdV2(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	return s.SandboxGetTaskId(ctx, req)
}

func (s *Server) TaskGetCommandRouterAccess(ctx context.Context, req *pb.TaskGetCommandRouterAccessRequest) (*pb.TaskGetCommandRouterAccessResponse, error) {
	if _, err := s.lookupTask(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	return pb.TaskGetCommandRouterAccessResponse_builder{Jwt: s.tokens.sign(req.GetTaskId()), Url: routerURL(ctx)}.Build(), nil
}

func (s *Server) SandboxGetCommandRouterAccess(ctx context.Context, req *pb.SandboxGetCommandRouterAccessRequest) (*pb.SandboxGetCommandRouterAccessResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return pb.SandboxGetCommandRouterAccessResponse_builder{Jwt: s.tokens.sign(sb.taskID), Url: routerURL(ctx)}.Build(), nil
}

func (s *Server) SandboxWait(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Duration(float64(req.GetTimeout()) * float64(time.Second)))
	for {
		s.mu.Lock()
		r := sb.result
		s.mu.Unlock()
		if r != nil || !time.Now().Before(deadline) {
			return pb.SandboxWaitResponse_builder{Result: r,
				Metadata: pb.SandboxHandleMetadata_builder{AppId: sb.appID, Result: r}.Build()}.Build(), nil
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(min(100*time.Millisecond, time.Until(deadline))):
		}
		s.refresh(ctx, sb)
	}
}

func (s *Server) SandboxWaitV2(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	return s.SandboxWait(ctx, req)
}

func (s *Server) SandboxTerminate(ctx context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	// Recorded before the engine kills anything, so the command's death that follows
	// does not count as its exit: terminated wins.
	s.finish(sb, terminatedResult())
	if err := s.o.Engine.Terminate(ctx, sb.engineID); err != nil && !errors.Is(err, engine.ErrNotFound) {
		return nil, engineError("Sandbox", err)
	}
	s.closeTunnels(sb.id)
	return pb.SandboxTerminateResponse_builder{}.Build(), nil
}

func (s *Server) SandboxTerminateV2(ctx context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	return s.SandboxTerminate(ctx, req)
}

func (s *Server) SandboxGetTunnels(ctx context.Context, req *pb.SandboxGetTunnelsRequest) (*pb.SandboxGetTunnelsResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	r := sb.result
	s.mu.Unlock()
	if r != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox '%s' has already finished", sb.id)
	}
	tunnels, err := s.tunnelData(sb)
	if err != nil {
		return nil, err
	}
	return pb.SandboxGetTunnelsResponse_builder{Tunnels: tunnels,
		Result: pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build()}.Build(), nil
}

func (s *Server) SandboxGetTunnelsV2(ctx context.Context, req *pb.SandboxGetTunnelsRequest) (*pb.SandboxGetTunnelsResponse, error) {
	return s.SandboxGetTunnels(ctx, req)
}

func (s *Server) tunnelData(sb *sandbox) ([]*pb.TunnelData, error) {
	var out []*pb.TunnelData
	for _, p := range sb.ports {
		t, err := s.openTunnel(sb, int(p.GetPort()), !p.GetUnencrypted())
		if err != nil {
			return nil, status.Errorf(codes.Internal, "tunnel for port %d: %v", p.GetPort(), err)
		}
		d := pb.TunnelData_builder{ContainerPort: p.GetPort(), Host: "127.0.0.1", Port: uint32(t.port)}
		if p.GetUnencrypted() {
			d.UnencryptedHost, d.UnencryptedPort = proto.String("127.0.0.1"), proto.Uint32(uint32(t.port))
		}
		out = append(out, d.Build())
	}
	return out, nil
}

func (s *Server) SandboxList(ctx context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	if err := s.reload(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	all := slices.Collect(maps.Values(s.sandboxes))
	s.mu.Unlock()
	want := map[string]string{}
	for _, t := range req.GetTags() {
		want[t.GetTagName()] = t.GetTagValue()
	}
	var out []*pb.SandboxInfo
	for _, sb := range all {
		if sb.engineID == "" || req.GetAppId() != "" && sb.appID != req.GetAppId() {
			continue
		}
		s.refresh(ctx, sb)
		s.mu.Lock()
		r, tags := sb.result, maps.Clone(sb.tags)
		s.mu.Unlock()
		if r != nil && !req.GetIncludeFinished() {
			continue
		}
		created := float64(sb.created.UnixNano()) / 1e9
		if b := req.GetBeforeTimestamp(); b > 0 && created >= b {
			continue
		}
		match := true
		for k, v := range want {
			if tags[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		var pt []*pb.SandboxTag
		for _, k := range slices.Sorted(maps.Keys(tags)) {
			pt = append(pt, pb.SandboxTag_builder{TagName: k, TagValue: tags[k]}.Build())
		}
		out = append(out, pb.SandboxInfo_builder{Id: sb.id, CreatedAt: created, AppId: sb.appID, Name: sb.name,
			ImageId: sb.imageID, Tags: pt,
			TaskInfo: pb.TaskInfo_builder{Id: sb.taskID, SandboxId: sb.id, Result: r,
				StartedAt: created}.Build()}.Build())
	}
	slices.SortFunc(out, func(a, b *pb.SandboxInfo) int {
		switch {
		case a.GetCreatedAt() > b.GetCreatedAt():
			return -1
		case a.GetCreatedAt() < b.GetCreatedAt():
			return 1
		}
		return strings.Compare(a.GetId(), b.GetId())
	})
	return pb.SandboxListResponse_builder{Sandboxes: out}.Build(), nil
}

func (s *Server) SandboxListV2(ctx context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	return s.SandboxList(ctx, req)
}

func (s *Server) SandboxGetFromName(ctx context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	if err := s.reload(ctx); err != nil {
		return nil, err
	}
	appID := stableID("ap", req.GetEnvironmentName()+"/"+req.GetAppName())
	s.mu.Lock()
	var found []*sandbox
	for _, sb := range s.sandboxes {
		if sb.appID == appID && sb.name == req.GetSandboxName() && sb.engineID != "" {
			found = append(found, sb)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(found, func(a, b *sandbox) int { return b.created.Compare(a.created) })
	var last *sandbox
	for _, sb := range found {
		s.refresh(ctx, sb)
		s.mu.Lock()
		alive := sb.result == nil
		s.mu.Unlock()
		if alive {
			return pb.SandboxGetFromNameResponse_builder{SandboxId: sb.id}.Build(), nil
		}
		if last == nil {
			last = sb
		}
	}
	if req.GetIncludeTerminated() && last != nil {
		return pb.SandboxGetFromNameResponse_builder{SandboxId: last.id}.Build(), nil
	}
	return nil, status.Errorf(codes.NotFound, "Sandbox with name '%s' not found in App '%s'", req.GetSandboxName(), req.GetAppName())
}

func (s *Server) SandboxGetFromNameV2(ctx context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	return s.SandboxGetFromName(ctx, req)
}

func (s *Server) SandboxTagsSet(ctx context.Context, req *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	sb.tags = map[string]string{}
	for _, t := range req.GetTags() {
		sb.tags[t.GetTagName()] = t.GetTagValue()
	}
	s.mu.Unlock()
	return &emptypb.Empty{}, nil
}

func (s *Server) SandboxTagsSetV2(ctx context.Context, req *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	return s.SandboxTagsSet(ctx, req)
}

func (s *Server) SandboxTagsGet(ctx context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.SandboxTag
	for _, k := range slices.Sorted(maps.Keys(sb.tags)) {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: sb.tags[k]}.Build())
	}
	return pb.SandboxTagsGetResponse_builder{Tags: out}.Build(), nil
}

func (s *Server) SandboxTagsGetV2(ctx context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	return s.SandboxTagsGet(ctx, req)
}
