package modalserver

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modalnet"
)

// --- sandbox creation -----------------------------------------------------------------

// defaultSandboxTimeout is Modal's default sandbox lifetime.
const defaultSandboxTimeout = 5 * time.Minute

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

// refuseLocalOnly refuses what a sandbox definition asks that the local server cannot
// honour, rather than ignore it.
func refuseLocalOnly(def *pb.Sandbox) error {
	switch {
	case def.GetResources().GetGpuConfig().GetCount() > 0:
		return localOnly("GPUs are not available")
	case len(def.GetNfsMounts()) > 0 || len(def.GetCloudBucketMounts()) > 0:
		return localOnly("NFS and cloud bucket mounts are not available")
	case def.GetEnableSnapshot():
		return localOnly("memory snapshots are not available")
	case def.GetIdleTimeoutSecs() > 0:
		return localOnly("idle timeouts are not available (use a timeout)")
	case def.GetProxyId() != "":
		return localOnly("Proxies are not available")
	}
	return nil
}

// imageEnv adds the image's ENV to env, below what env already has (secrets and the
// definition's variables win), and returns its build steps.
func imageEnv(img *image, env map[string]string) buildSteps {
	steps := parseBuildSteps(img.commands)
	imgEnv := map[string]string{}
	for _, kv := range steps.env {
		k, v, _ := strings.Cut(kv, "=")
		imgEnv[k] = v // a later ENV of the same key wins, as in a build
	}
	for k, v := range imgEnv {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	return steps
}

// egress is the engine's Egress and EgressHosts for def's network access. A Modal
// sandbox has its own network and reaches the outside unless blocked (blockNetwork,
// which SDKs send as the old flag or as NetworkAccess BLOCKED): the engine's Egress
// (its own ports, the outside through its proxy), never the host's network. An
// ALLOWLIST's CIDRs and domains become EgressHosts (modalnet.Join), so the engine's
// proxy lets the sandbox reach those and nothing else; both lists empty is no egress
// at all, as on Modal. A malformed entry is InvalidArgument.
func egress(def *pb.Sandbox) (bool, []string, error) {
	na := def.GetNetworkAccess()
	switch {
	case def.GetBlockNetwork() || na.GetNetworkAccessType() == pb.NetworkAccess_BLOCKED:
		return false, nil, nil
	case na.GetNetworkAccessType() != pb.NetworkAccess_ALLOWLIST:
		return true, nil, nil
	}
	hosts, err := modalnet.Join(na.GetAllowedCidrs(), na.GetAllowedDomains())
	if err != nil {
		return false, nil, status.Errorf(codes.InvalidArgument, "network access: %v", err)
	}
	return len(hosts) > 0, hosts, nil
}

// engineSpec is the engine's view of sb.
func engineSpec(sb *sandbox, img *image, def *pb.Sandbox, env map[string]string, vols []engine.VolumeMount) (engine.Spec, error) {
	out, hosts, err := egress(def)
	if err != nil {
		return engine.Spec{}, err
	}
	spec := engine.Spec{Snapshot: img.snapshot, Image: img.built, Egress: out, EgressHosts: hosts, Volumes: vols,
		Labels: map[string]string{labelID: sb.id, labelTask: sb.taskID, labelApp: sb.appID, labelName: sb.name, labelImage: sb.imageID,
			labelDeadline: strconv.FormatInt(sb.deadline.UnixMilli(), 10)}}
	var portLabels []string
	for _, p := range sb.ports {
		spec.Ports = append(spec.Ports, int(p.GetPort()))
		l := strconv.Itoa(int(p.GetPort()))
		if p.GetUnencrypted() {
			l += "u"
		}
		portLabels = append(portLabels, l)
	}
	spec.Labels[labelPorts] = strings.Join(portLabels, ",")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		spec.Env = append(spec.Env, k+"="+env[k])
	}
	spec.Timeout = sb.deadline.Sub(sb.created)
	if mb := def.GetResources().GetMemoryMb(); mb > 0 {
		spec.Limits.MemoryBytes = int64(mb) << 20
	}
	if mb := def.GetResources().GetMemoryMbMax(); mb > 0 {
		spec.Limits.MemoryBytes = int64(mb) << 20
	}
	// A CPU request is a share, not a limit: only the limit is applied.
	if m := def.GetResources().GetMilliCpuMax(); m > 0 {
		spec.Limits.CPUMillis = int64(m)
	}
	return spec, nil
}

func (s *Server) create(ctx context.Context, a createArgs) (*sandbox, error) {
	def := a.def
	s.mu.Lock()
	_, appOK := s.apps[a.appID]
	s.mu.Unlock()
	if !appOK {
		return nil, status.Errorf(codes.NotFound, "App '%s' not found", a.appID)
	}
	img, err := s.builtImage(ctx, def.GetImageId())
	if err != nil {
		return nil, err
	}
	if err := refuseLocalOnly(def); err != nil {
		return nil, err
	}
	vols, err := s.volumeMounts(ctx, def)
	if err != nil {
		return nil, err
	}
	steps := imageEnv(img, a.env)
	for _, k := range slices.Sorted(maps.Keys(def.GetEnvironmentVariables().GetContents())) {
		a.env[k] = def.GetEnvironmentVariables().GetContents()[k]
	}
	workdir := def.GetWorkdir()
	if workdir == "" {
		workdir = steps.workdir
	}
	now := s.o.Now()
	id := newID("sb")
	if a.v2 {
		id = newV2SandboxID(now)
	}
	sb := newSandbox(&sandbox{id: id, taskID: "ta-" + strings.TrimPrefix(id, "sb-"), appID: a.appID, name: def.GetName(),
		imageID: img.id, created: now, ports: def.GetOpenPorts().GetPorts(), workdir: workdir})
	for _, t := range a.tags {
		sb.tags[t.GetTagName()] = t.GetTagValue()
	}
	timeout := time.Duration(def.GetTimeoutSecs()) * time.Second
	if timeout == 0 {
		timeout = defaultSandboxTimeout
	}
	sb.deadline = now.Add(timeout)
	if def.HasReadinessProbe() {
		sb.ready = make(chan struct{})
	}
	spec, err := engineSpec(sb, img, def, a.env, vols)
	if err != nil {
		return nil, err
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
	if steps.workdir != "" {
		// WORKDIR makes its directory, as a build would have.
		if err := s.o.Engine.MkdirAll(ctx, info.ID, steps.workdir); err != nil {
			s.finish(sb, terminatedResult())
			s.endSandbox(sb)
			return nil, engineError("WORKDIR "+steps.workdir, err)
		}
	}
	if args := def.GetEntrypointArgs(); len(args) > 0 {
		if err := s.runEntrypoint(sb, args, def.GetPtyInfo()); err != nil {
			s.finish(sb, pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_FAILURE, Exception: err.Error()}.Build())
			s.endSandbox(sb)
			return nil, err
		}
	}
	if def.HasReadinessProbe() {
		s.startProbe(sb, def.GetReadinessProbe())
	}
	s.watchDeadline(sb)
	return sb, nil
}
