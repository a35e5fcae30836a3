package modalserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

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
