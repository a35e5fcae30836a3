package modalserver

import (
	"context"
	"errors"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// --- volumes ----------------------------------------------------------------------------
//
// Modal Volumes are the engine's named volumes (engine.Volumes), served only when the
// engine says it has them (Capabilities().Volumes); otherwise every volume call, and a
// create that mounts one, is refused with the reason. The engine volume's name is the
// Modal volume id (derived from environment and name, so it survives a restart); the
// Modal name and environment are kept in its labels.

// Volume labels.
const (
	labelVolumeName      = "modal.volume_name"
	labelVolumeEnv       = "modal.volume_env"
	labelVolumeEphemeral = "modal.volume_ephemeral"
)

// ephemeralVolumeTTL is how long an ephemeral volume lives without a heartbeat (the
// SDKs send one every few hundred seconds less than this).
const ephemeralVolumeTTL = 10 * time.Minute

func (s *Server) volumeEngine() (engine.Volumes, error) {
	v, ok := s.o.Engine.(engine.Volumes)
	if !ok || !s.o.Engine.Capabilities().Volumes {
		return nil, localOnly("Volumes are not available: the engine under this server has no volumes (its Capabilities().Volumes is false)")
	}
	return v, nil
}

func volumeError(name string, err error) error {
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return status.Errorf(codes.NotFound, "Volume '%s' not found", name)
	case errors.Is(err, engine.ErrInUse):
		return status.Errorf(codes.FailedPrecondition, "Volume '%s' is in use: %v", name, err)
	}
	return engineError("Volume", err)
}

func (s *Server) VolumeGetOrCreate(ctx context.Context, req *pb.VolumeGetOrCreateRequest) (*pb.VolumeGetOrCreateResponse, error) {
	vols, err := s.volumeEngine()
	if err != nil {
		return nil, err
	}
	s.sweepEphemeralVolumes(ctx, vols)
	name, env := req.GetDeploymentName(), req.GetEnvironmentName()
	labels := map[string]string{labelVolumeName: name, labelVolumeEnv: env}
	var info engine.VolumeInfo
	switch req.GetObjectCreationType() {
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_UNSPECIFIED:
		info, err = vols.GetVolume(ctx, stableID("vo", env+"/"+name))
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
		info, err = vols.CreateVolume(ctx, engine.VolumeSpec{Name: stableID("vo", env+"/"+name), Labels: labels}, true)
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS:
		info, err = vols.CreateVolume(ctx, engine.VolumeSpec{Name: stableID("vo", env+"/"+name), Labels: labels}, false)
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL:
		labels[labelVolumeName], labels[labelVolumeEphemeral] = "", "1"
		info, err = vols.CreateVolume(ctx, engine.VolumeSpec{Name: newID("vo"), Labels: labels}, false)
		if err == nil {
			s.mu.Lock()
			s.volumeBeats[info.Name] = time.Now()
			s.mu.Unlock()
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unsupported object creation type %v", req.GetObjectCreationType())
	}
	if err != nil {
		return nil, volumeError(name, err)
	}
	version := req.GetVersion()
	if version == pb.VolumeFsVersion_VOLUME_FS_VERSION_UNSPECIFIED {
		version = pb.VolumeFsVersion_VOLUME_FS_VERSION_V1
	}
	return pb.VolumeGetOrCreateResponse_builder{VolumeId: info.Name, Version: version,
		Metadata: pb.VolumeMetadata_builder{Name: name, Version: version}.Build()}.Build(), nil
}

func (s *Server) VolumeHeartbeat(ctx context.Context, req *pb.VolumeHeartbeatRequest) (*emptypb.Empty, error) {
	vols, err := s.volumeEngine()
	if err != nil {
		return nil, err
	}
	if _, err := vols.GetVolume(ctx, req.GetVolumeId()); err != nil {
		return nil, volumeError(req.GetVolumeId(), err)
	}
	s.mu.Lock()
	if _, ok := s.volumeBeats[req.GetVolumeId()]; ok {
		s.volumeBeats[req.GetVolumeId()] = time.Now()
	}
	s.mu.Unlock()
	return &emptypb.Empty{}, nil
}

// sweepEphemeralVolumes deletes the ephemeral volumes whose client stopped its
// heartbeats; one still mounted stays until a later sweep.
func (s *Server) sweepEphemeralVolumes(ctx context.Context, vols engine.Volumes) {
	var stale []string
	s.mu.Lock()
	for id, beat := range s.volumeBeats {
		if time.Since(beat) > ephemeralVolumeTTL {
			stale = append(stale, id)
		}
	}
	s.mu.Unlock()
	for _, id := range stale {
		if err := vols.RemoveVolume(ctx, id); err == nil || errors.Is(err, engine.ErrNotFound) {
			s.mu.Lock()
			delete(s.volumeBeats, id)
			s.mu.Unlock()
		}
	}
}

func (s *Server) VolumeDelete(ctx context.Context, req *pb.VolumeDeleteRequest) (*emptypb.Empty, error) {
	vols, err := s.volumeEngine()
	if err != nil {
		return nil, err
	}
	if err := vols.RemoveVolume(ctx, req.GetVolumeId()); errors.Is(err, engine.ErrInUse) {
		return nil, s.volumeInUse(ctx, vols, req.GetVolumeId())
	} else if err != nil {
		return nil, volumeError(req.GetVolumeId(), err)
	}
	s.mu.Lock()
	delete(s.volumeBeats, req.GetVolumeId())
	s.mu.Unlock()
	return &emptypb.Empty{}, nil
}

// volumeInUse is the refusal to delete a mounted volume, naming it and the sandboxes
// that mount it as the client knows them (Modal ids, not the engine's).
func (s *Server) volumeInUse(ctx context.Context, vols engine.Volumes, id string) error {
	info, err := vols.GetVolume(ctx, id)
	if err != nil {
		return volumeError(id, err)
	}
	name := info.Labels[labelVolumeName]
	if name == "" {
		name = id
	}
	users := make([]string, 0, len(info.UsedBy))
	s.mu.Lock()
	for _, eid := range info.UsedBy {
		user := eid
		for _, sb := range s.sandboxes {
			if sb.engineID == eid {
				user = sb.id
				break
			}
		}
		users = append(users, user)
	}
	s.mu.Unlock()
	return status.Errorf(codes.FailedPrecondition, "Volume '%s' is in use by %s", name, strings.Join(users, ", "))
}

func (s *Server) VolumeList(ctx context.Context, req *pb.VolumeListRequest) (*pb.VolumeListResponse, error) {
	vols, err := s.volumeEngine()
	if err != nil {
		return nil, err
	}
	infos, err := vols.ListVolumes(ctx)
	if err != nil {
		return nil, engineError("Volume list", err)
	}
	var items []*pb.VolumeListItem
	for _, v := range infos {
		name, named := v.Labels[labelVolumeName]
		if !named || name == "" || v.Labels[labelVolumeEnv] != req.GetEnvironmentName() {
			continue // not a named volume of this environment (or not this server's)
		}
		items = append(items, pb.VolumeListItem_builder{Label: name, VolumeId: v.Name,
			CreatedAt: float64(v.Created.UnixNano()) / 1e9,
			Metadata:  pb.VolumeMetadata_builder{Name: name, Version: pb.VolumeFsVersion_VOLUME_FS_VERSION_V1}.Build()}.Build())
	}
	return pb.VolumeListResponse_builder{Items: items, EnvironmentName: req.GetEnvironmentName()}.Build(), nil
}

// volumeMounts turns a sandbox's volume mounts into the engine's; any mount is refused
// when the engine has no volumes.
func (s *Server) volumeMounts(ctx context.Context, def *pb.Sandbox) ([]engine.VolumeMount, error) {
	if len(def.GetVolumeMounts()) == 0 {
		return nil, nil
	}
	vols, err := s.volumeEngine()
	if err != nil {
		return nil, err
	}
	var out []engine.VolumeMount
	for _, m := range def.GetVolumeMounts() {
		if m.HasSubPath() {
			return nil, localOnly("Volume sub-path mounts are not available (%s)", m.GetMountPath())
		}
		if _, err := vols.GetVolume(ctx, m.GetVolumeId()); err != nil {
			return nil, volumeError(m.GetVolumeId(), err)
		}
		out = append(out, engine.VolumeMount{Name: m.GetVolumeId(), Target: m.GetMountPath(), ReadOnly: m.GetReadOnly()})
	}
	return out, nil
}
