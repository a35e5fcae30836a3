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
	if err := s.checkBuildSteps(next.commands); err != nil {
		return nil, err
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
	line := fmt.Sprintf("local Modal server: the host stands in for %s; ENV and WORKDIR are applied, and %d build steps were accepted without running (SkipRunSteps)\n",
		img.tag, len(parseBuildSteps(img.commands).unrun))
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

// checkBuildSteps refuses the build steps the server cannot run (RUN, COPY, …), unless
// Options.SkipRunSteps accepts them unrun.
func (s *Server) checkBuildSteps(cmds []string) error {
	unrun := parseBuildSteps(cmds).unrun
	if len(unrun) == 0 || s.o.SkipRunSteps {
		return nil
	}
	if s.o.Engine.Capabilities().Images {
		// TODO(images): the engine boots images (Spec.Image) but has no builder in its
		// contract yet; once it has one, build the steps into an image here and record
		// its id on the image instead of refusing.
		return localOnly("cannot run the image's build step %q: the engine boots images but the local server cannot build them yet", unrun[0])
	}
	return localOnly("cannot run the image's build step %q: the local engine has no image builder, so the sandbox would start without what the step makes "+
		"(start the server with SkipRunSteps — sandboxctl: %s=1 — to accept such steps unrun, on the host's userland)", unrun[0], EnvSkipRunSteps)
}
