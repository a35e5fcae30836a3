package modalserver

import (
	"context"
	"maps"
	"slices"
	"strings"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxSecrets bounds the env secrets the server keeps.
const maxSecrets = 4096

// imageBuilderVersion is what the local server reports as its image builder.
const imageBuilderVersion = "2025.06"

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
	// The id is the contents' (the SDKs make one per create or exec that passes env),
	// so the same values are one record; at most maxSecrets are kept.
	env := req.GetEnvDict()
	var key strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		key.WriteString(k + "\x00" + env[k] + "\x00")
	}
	sec := &secret{id: stableID("st", key.String()), env: maps.Clone(env)}
	s.mu.Lock()
	if _, ok := s.secrets[sec.id]; !ok {
		if len(s.secrets) >= maxSecrets {
			for id := range s.secrets { // any one: a client re-creates what it still uses
				delete(s.secrets, id)
				break
			}
		}
		s.secrets[sec.id] = sec
	}
	s.mu.Unlock()
	return pb.SecretGetOrCreateResponse_builder{SecretId: sec.id}.Build(), nil
}
