package modalserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// imageBuilderVersion is what the local server reports as its image builder.
const imageBuilderVersion = "2025.06"

// defaultSandboxTimeout is Modal's default sandbox lifetime.
const defaultSandboxTimeout = 5 * time.Minute

func (s *Server) AuthTokenGet(ctx context.Context, _ *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	return pb.AuthTokenGetResponse_builder{Token: s.tokens.sign("client")}.Build(), nil
}

func (s *Server) EnvironmentGetOrCreate(ctx context.Context, req *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	name := req.GetDeploymentName()
	if name == "" {
		name = "main"
	}
	return pb.EnvironmentGetOrCreateResponse_builder{
		EnvironmentId: stableID("en", name),
		Metadata: pb.EnvironmentMetadata_builder{Name: name,
			Settings: pb.EnvironmentSettings_builder{ImageBuilderVersion: imageBuilderVersion}.Build()}.Build(),
	}.Build(), nil
}

func (s *Server) AppGetOrCreate(ctx context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	name := req.GetAppName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "App name is required")
	}
	id := stableID("ap", req.GetEnvironmentName()+"/"+name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.apps[id]; !ok {
		if req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING &&
			req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL &&
			!s.appHasSandboxesLocked(id) {
			return nil, status.Errorf(codes.NotFound, "App '%s' not found", name)
		}
		s.apps[id] = &app{id: id, name: name, env: req.GetEnvironmentName(), created: s.o.Now()}
	}
	return pb.AppGetOrCreateResponse_builder{AppId: id,
		HandleMetadata: pb.AppHandleMetadata_builder{AppId: id, EnvironmentName: req.GetEnvironmentName()}.Build()}.Build(), nil
}

// appHasSandboxesLocked: an app the server forgot in a restart still exists while
// the engine runs its sandboxes.
func (s *Server) appHasSandboxesLocked(id string) bool {
	for _, sb := range s.sandboxes {
		if sb.appID == id {
			return true
		}
	}
	return false
}

func (s *Server) SecretGetOrCreate(ctx context.Context, req *pb.SecretGetOrCreateRequest) (*pb.SecretGetOrCreateResponse, error) {
	if req.GetDeploymentName() != "" && len(req.GetEnvDict()) == 0 {
		return nil, localOnly("named Secrets are not stored locally (Secret '%s'); pass the values as env", req.GetDeploymentName())
	}
	sec := &secret{id: newID("st"), env: maps.Clone(req.GetEnvDict())}
	s.mu.Lock()
	s.secrets[sec.id] = sec
	s.mu.Unlock()
	return pb.SecretGetOrCreateResponse_builder{SecretId: sec.id}.Build(), nil
}

// --- images ---------------------------------------------------------------------------

func (s *Server) ImageGetOrCreate(ctx context.Context, req *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	img := req.GetImage()
	if img.GetGpuConfig().GetCount() > 0 {
		return nil, localOnly("GPU images cannot be built")
	}
	if img.GetImageRegistryConfig().GetRegistryAuthType() != pb.RegistryAuthType_REGISTRY_AUTH_TYPE_UNSPECIFIED {
		return nil, localOnly("private registries cannot be pulled")
	}
	cmds := img.GetDockerfileCommands()
	if len(cmds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Image has no Dockerfile commands")
	}
	from, ok := strings.CutPrefix(strings.TrimSpace(cmds[0]), "FROM ")
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "Image must start with FROM")
	}
	from = strings.TrimSpace(from)
	next := &image{commands: slices.Clone(cmds[1:])}
	var parent *image
	for _, b := range img.GetBaseImages() {
		if b.GetDockerTag() == from {
			s.mu.Lock()
			parent = s.images[b.GetImageId()]
			s.mu.Unlock()
			if parent == nil {
				return nil, status.Errorf(codes.NotFound, "Image '%s' not found", b.GetImageId())
			}
		}
	}
	if parent != nil {
		next.tag, next.snapshot = parent.tag, parent.snapshot
		next.commands = append(slices.Clone(parent.commands), next.commands...)
	} else {
		if !s.hostImage(from) {
			return nil, localOnly("cannot pull registry image %q: the local engine runs sandboxes on the host's userland and stands in only for %s", from, strings.Join(s.o.HostImages, ", "))
		}
		next.tag = from
	}
	key := next.tag + "\x00" + next.snapshot + "\x00" + strings.Join(next.commands, "\x00")
	next.id = stableID("im", key)
	if err := s.addImage(next); err != nil {
		return nil, status.Errorf(codes.Internal, "saving image: %v", err)
	}
	return pb.ImageGetOrCreateResponse_builder{ImageId: next.id,
		Result:   pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
		Metadata: pb.ImageMetadata_builder{ImageBuilderVersion: proto.String(imageBuilderVersion)}.Build()}.Build(), nil
}

func (s *Server) ImageJoinStreaming(req *pb.ImageJoinStreamingRequest, stream grpc.ServerStreamingServer[pb.ImageJoinStreamingResponse]) error {
	s.mu.Lock()
	img := s.images[req.GetImageId()]
	s.mu.Unlock()
	if img == nil {
		return status.Errorf(codes.NotFound, "Image '%s' not found", req.GetImageId())
	}
	line := fmt.Sprintf("local Modal server: %s stands in for %s; its %d build commands were recorded, not run\n", "the host", img.tag, len(img.commands))
	return stream.Send(pb.ImageJoinStreamingResponse_builder{
		TaskLogs: []*pb.TaskLogs{pb.TaskLogs_builder{Data: line, FileDescriptor: pb.FileDescriptor_FILE_DESCRIPTOR_INFO}.Build()},
		Result:   pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
		EntryId:  "1", Eof: true}.Build())
}

func (s *Server) ImageFromId(ctx context.Context, req *pb.ImageFromIdRequest) (*pb.ImageFromIdResponse, error) {
	s.mu.Lock()
	img := s.images[req.GetImageId()]
	s.mu.Unlock()
	if img == nil {
		return nil, status.Errorf(codes.NotFound, "Image '%s' not found", req.GetImageId())
	}
	return pb.ImageFromIdResponse_builder{ImageId: img.id,
		Metadata: pb.ImageMetadata_builder{ImageBuilderVersion: proto.String(imageBuilderVersion)}.Build()}.Build(), nil
}

func (s *Server) ImageGetByTag(ctx context.Context, req *pb.ImageGetByTagRequest) (*pb.ImageGetByTagResponse, error) {
	return nil, localOnly("published images are not stored locally (%q)", req.GetTag())
}

// --- sandbox creation -----------------------------------------------------------------

type createArgs struct {
	appID string
	def   *pb.Sandbox
	env   map[string]string
	tags  []*pb.SandboxTag
	v2    bool
}

func (s *Server) SandboxCreate(ctx context.Context, req *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	env := map[string]string{}
	for _, id := range req.GetDefinition().GetSecretIds() {
		if err := s.addSecret(env, id); err != nil {
			return nil, err
		}
	}
	sb, err := s.create(ctx, createArgs{appID: req.GetAppId(), def: req.GetDefinition(), env: env, tags: req.GetTags()})
	if err != nil {
		return nil, err
	}
	return pb.SandboxCreateResponse_builder{SandboxId: sb.id}.Build(), nil
}

func (s *Server) SandboxCreateV2(ctx context.Context, req *pb.SandboxCreateV2Request) (*pb.SandboxCreateV2Response, error) {
	env := map[string]string{}
	for _, id := range req.GetDefinition().GetSecretIds() {
		if err := s.addSecret(env, id); err != nil {
			return nil, err
		}
	}
	if err := s.addSources(env, req.GetSecretSources()); err != nil {
		return nil, err
	}
	maps.Copy(env, req.GetEphemeralSecrets().GetContents())
	sb, err := s.create(ctx, createArgs{appID: req.GetAppId(), def: req.GetDefinition(), env: env, tags: req.GetTags(), v2: true})
	if err != nil {
		return nil, err
	}
	return pb.SandboxCreateV2Response_builder{SandboxId: sb.id, TaskId: sb.taskID,
		CommandRouterAccess: pb.CommandRouterAccess_builder{Jwt: s.tokens.sign(sb.taskID), Url: routerURL(ctx)}.Build(),
	}.Build(), nil
}

func (s *Server) addSecret(env map[string]string, id string) error {
	s.mu.Lock()
	sec := s.secrets[id]
	s.mu.Unlock()
	if sec == nil {
		return status.Errorf(codes.NotFound, "Secret '%s' not found", id)
	}
	maps.Copy(env, sec.env)
	return nil
}

func (s *Server) addSources(env map[string]string, sources []*pb.SecretSource) error {
	for _, src := range sources {
		if src.HasSecretId() {
			if err := s.addSecret(env, src.GetSecretId()); err != nil {
				return err
			}
			continue
		}
		maps.Copy(env, src.GetEnv().GetContents())
	}
	return nil
}

func (s *Server) create(ctx context.Context, a createArgs) (*sandbox, error) {
	def := a.def
	s.mu.Lock()
	_, appOK := s.apps[a.appID]
	img := s.images[def.GetImageId()]
	s.mu.Unlock()
	if !appOK {
		return nil, status.Errorf(codes.NotFound, "App '%s' not found", a.appID)
	}
	if img == nil {
		return nil, status.Errorf(codes.NotFound, "Image '%s' not found", def.GetImageId())
	}
	switch {
	case def.GetResources().GetGpuConfig().GetCount() > 0:
		return nil, localOnly("GPUs are not available")
	case len(def.GetVolumeMounts()) > 0 || len(def.GetNfsMounts()) > 0 || len(def.GetCloudBucketMounts()) > 0:
		return nil, localOnly("Volumes and bucket mounts are not available")
	case def.GetEnableSnapshot():
		return nil, localOnly("memory snapshots are not available")
	}
	for _, k := range slices.Sorted(maps.Keys(def.GetEnvironmentVariables().GetContents())) {
		a.env[k] = def.GetEnvironmentVariables().GetContents()[k]
	}
	now := s.o.Now()
	id := newID("sb")
	if a.v2 {
		id = newV2SandboxID(now)
	}
	sb := &sandbox{id: id, taskID: "ta-" + strings.TrimPrefix(id, "sb-"), appID: a.appID, name: def.GetName(),
		imageID: img.id, created: now, ports: def.GetOpenPorts().GetPorts(), tags: map[string]string{},
		workdir: def.GetWorkdir(), execs: map[string]*process{}}
	for _, t := range a.tags {
		sb.tags[t.GetTagName()] = t.GetTagValue()
	}
	var portLabels []string
	// A Modal sandbox has its own network and reaches the outside unless blocked: the
	// engine's Egress (its own ports, outside through a proxy), never the host's network.
	spec := engine.Spec{Snapshot: img.snapshot, Egress: !def.GetBlockNetwork(),
		Labels: map[string]string{labelID: sb.id, labelTask: sb.taskID, labelApp: sb.appID, labelName: sb.name, labelImage: sb.imageID}}
	for _, p := range sb.ports {
		spec.Ports = append(spec.Ports, int(p.GetPort()))
		l := strconv.Itoa(int(p.GetPort()))
		if p.GetUnencrypted() {
			l += "u"
		}
		portLabels = append(portLabels, l)
	}
	spec.Labels[labelPorts] = strings.Join(portLabels, ",")
	for _, k := range slices.Sorted(maps.Keys(a.env)) {
		spec.Env = append(spec.Env, k+"="+a.env[k])
	}
	spec.Timeout = time.Duration(def.GetTimeoutSecs()) * time.Second
	if spec.Timeout == 0 {
		spec.Timeout = defaultSandboxTimeout
	}
	if mb := def.GetResources().GetMemoryMb(); mb > 0 {
		spec.Limits.MemoryBytes = int64(mb) << 20
	}

	// The name is unique among an app's running sandboxes (Modal's rule); the engine's
	// own name space is global, so the server keeps this one.
	s.mu.Lock()
	if sb.name != "" {
		for _, o := range s.sandboxes {
			if o.appID == sb.appID && o.name == sb.name && o.result == nil {
				s.mu.Unlock()
				return nil, status.Errorf(codes.AlreadyExists, "Sandbox with name '%s' already exists in App", sb.name)
			}
		}
	}
	s.sandboxes[sb.id] = sb // reserves the name while the engine creates
	s.tasks[sb.taskID] = sb.id
	s.mu.Unlock()
	info, err := s.o.Engine.Create(ctx, spec)
	if err != nil {
		s.mu.Lock()
		delete(s.sandboxes, sb.id)
		delete(s.tasks, sb.taskID)
		s.mu.Unlock()
		return nil, engineError("Sandbox", err)
	}
	s.mu.Lock()
	sb.engineID = info.ID
	s.mu.Unlock()
	if args := def.GetEntrypointArgs(); len(args) > 0 {
		s.runEntrypoint(sb, args, spec.Env)
	}
	return sb, nil
}

// runEntrypoint runs the sandbox's command; the sandbox ends when it does, as on Modal.
func (s *Server) runEntrypoint(sb *sandbox, args, env []string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		code, err := s.o.Engine.Exec(s.ctx(), sb.engineID, engine.ExecRequest{Argv: args, Cwd: sb.workdir})
		if s.ctx().Err() != nil {
			return // the server is closing; the sandbox lives on
		}
		st := pb.GenericResult_GENERIC_STATUS_SUCCESS
		msg := ""
		if err != nil {
			st, msg = pb.GenericResult_GENERIC_STATUS_FAILURE, err.Error()
		} else if code != 0 {
			st = pb.GenericResult_GENERIC_STATUS_FAILURE
		}
		s.finish(sb, pb.GenericResult_builder{Status: st, Exitcode: int32(code), Exception: msg}.Build())
		_ = s.o.Engine.Terminate(context.WithoutCancel(s.ctx()), sb.engineID)
		s.closeTunnels(sb.id)
	}()
}

// finish records how a sandbox ended, once.
func (s *Server) finish(sb *sandbox, r *pb.GenericResult) {
	s.mu.Lock()
	if sb.result == nil {
		sb.result = r
	}
	s.mu.Unlock()
	sb.cancelExecs()
}

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

// refresh asks the engine whether a running sandbox still is.
func (s *Server) refresh(ctx context.Context, sb *sandbox) {
	s.mu.Lock()
	done, eid := sb.result != nil, sb.engineID
	s.mu.Unlock()
	if done || eid == "" {
		return
	}
	info, err := s.o.Engine.Get(ctx, eid)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		s.finish(sb, pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_TERMINATED}.Build())
	case err == nil && info.State == engine.StateDead:
		r := pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_TERMINATED}.Build()
		if info.ExitCode != nil {
			r.SetExitcode(int32(*info.ExitCode))
			if *info.ExitCode == 124 {
				r.SetStatus(pb.GenericResult_GENERIC_STATUS_TIMEOUT)
			}
		}
		s.finish(sb, r)
		s.closeTunnels(sb.id)
	}
}

// reload adds the engine's sandboxes that carry this server's labels.
func (s *Server) reload(ctx context.Context) error {
	infos, err := s.o.Engine.List(ctx)
	if err != nil {
		return engineError("Sandbox list", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, info := range infos {
		id := info.Labels[labelID]
		if id == "" || s.sandboxes[id] != nil {
			continue
		}
		sb := &sandbox{id: id, taskID: info.Labels[labelTask], engineID: info.ID, appID: info.Labels[labelApp],
			name: info.Labels[labelName], imageID: info.Labels[labelImage], created: info.Created,
			tags: map[string]string{}, execs: map[string]*process{}}
		for _, p := range strings.Split(info.Labels[labelPorts], ",") {
			n, err := strconv.Atoi(strings.TrimSuffix(p, "u"))
			if err == nil {
				sb.ports = append(sb.ports, pb.PortSpec_builder{Port: uint32(n), Unencrypted: strings.HasSuffix(p, "u")}.Build())
			}
		}
		if info.State == engine.StateDead {
			sb.result = pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_TERMINATED}.Build()
		}
		s.sandboxes[id] = sb
		s.tasks[sb.taskID] = id
	}
	return nil
}

// --- sandbox calls ---------------------------------------------------------------------

func (s *Server) SandboxGetTaskId(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.result != nil {
		return pb.SandboxGetTaskIdResponse_builder{TaskResult: sb.result}.Build(), nil
	}
	if sb.engineID == "" {
		return pb.SandboxGetTaskIdResponse_builder{}.Build(), nil // still being created
	}
	return pb.SandboxGetTaskIdResponse_builder{TaskId: proto.String(sb.taskID)}.Build(), nil
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
	if err := s.o.Engine.Terminate(ctx, sb.engineID); err != nil && !errors.Is(err, engine.ErrNotFound) {
		return nil, engineError("Sandbox", err)
	}
	s.finish(sb, pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_TERMINATED}.Build())
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
