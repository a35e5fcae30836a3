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
		next.tag = from
	}
	key := next.tag + "\x00" + next.snapshot + "\x00" + strings.Join(next.commands, "\x00")
	next.id = stableID("im", key)
	if s.needsBuild(next) {
		return s.buildImage(ctx, next)
	}
	if next.snapshot == "" && !s.hostImage(next.tag) {
		return nil, localOnly("cannot pull registry image %q: the local engine runs sandboxes on the host's userland and stands in only for %s", next.tag, strings.Join(s.o.HostImages, ", "))
	}
	if err := s.checkBuildSteps(next.commands); err != nil {
		return nil, err
	}
	if next.snapshot == "" {
		s.log.Info(strings.TrimSpace(standInLine(next, s.o.SkipRunSteps)), "image_id", next.id)
	}
	if err := s.addImage(next); err != nil {
		return nil, status.Errorf(codes.Internal, "saving image: %v", err)
	}
	return imageResult(next.id, true), nil
}

// imageResult answers ImageGetOrCreate; without a result (built false) the SDK waits
// for the build with ImageJoinStreaming.
func imageResult(id string, built bool) *pb.ImageGetOrCreateResponse {
	r := pb.ImageGetOrCreateResponse_builder{ImageId: id,
		Metadata: pb.ImageMetadata_builder{ImageBuilderVersion: proto.String(imageBuilderVersion)}.Build()}
	if built {
		r.Result = pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build()
	}
	return r.Build()
}

// needsBuild says whether the Builder builds img: on a server that builds, every
// registry image is built (a bare debian:bookworm-slim too: its base comes from the
// store, and its ENV and WORKDIR become the image's configuration), so a sandbox never
// runs on the engine's default root in its place. A snapshot's chain is built only to
// be refused when it has steps to run (buildImage).
func (s *Server) needsBuild(img *image) bool {
	if !s.canBuild() {
		return false
	}
	return img.snapshot == "" || len(parseBuildSteps(img.commands).unrun) > 0
}

// buildImage answers ImageGetOrCreate for an image the Builder builds: at once when it
// was built before, else after starting (or joining) its build.
func (s *Server) buildImage(ctx context.Context, img *image) (*pb.ImageGetOrCreateResponse, error) {
	if img.snapshot != "" {
		return nil, localOnly("cannot run the image's build step %q on a snapshot: images are built from registry bases only", parseBuildSteps(img.commands).unrun[0])
	}
	s.mu.Lock()
	old := s.images[img.id]
	s.mu.Unlock()
	if old != nil && old.built != "" {
		return imageResult(img.id, true), nil
	}
	if err := s.o.Builder.CheckImage(ctx, img.tag, img.commands); err != nil {
		return nil, localOnly("cannot build the image: %v", err)
	}
	s.startBuild(img)
	return imageResult(img.id, false), nil
}

func (s *Server) ImageJoinStreaming(req *pb.ImageJoinStreamingRequest, stream grpc.ServerStreamingServer[pb.ImageJoinStreamingResponse]) error {
	s.mu.Lock()
	img, b := s.images[req.GetImageId()], s.builds[req.GetImageId()]
	s.mu.Unlock()
	if b != nil {
		return joinBuild(req, b, stream)
	}
	if img == nil {
		return status.Errorf(codes.NotFound, "Image '%s' not found", req.GetImageId())
	}
	if img.built != "" {
		return stream.Send(pb.ImageJoinStreamingResponse_builder{
			Result:  pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
			EntryId: "1", Eof: true}.Build())
	}
	line := standInLine(img, s.o.SkipRunSteps)
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
		return localOnly("cannot run the image's build step %q: the engine boots images but the server has no image builder (Options.Builder)", unrun[0])
	}
	return localOnly("cannot run the image's build step %q: the local engine has no image builder, so the sandbox would start without what the step makes "+
		"(start the server with SkipRunSteps — sandboxctl: %s=1 — to accept such steps unrun, on the host's userland)", unrun[0], EnvSkipRunSteps)
}

// standInLine is the build output of an image that is not built: a snapshot, or a
// registry tag the server lets the engine's default root (the host's userland) stand
// in for. It says which, so nobody takes the stand-in for the image.
func standInLine(img *image, skipRun bool) string {
	unrun := len(parseBuildSteps(img.commands).unrun)
	if img.snapshot != "" {
		return fmt.Sprintf("local Modal server: the image restores snapshot %s; ENV and WORKDIR are applied\n", img.snapshot)
	}
	line := fmt.Sprintf("local Modal server: %s is not booted from an image: the sandbox runs on the engine's default root (the host's userland stands in for it", img.tag)
	if skipRun {
		line += ", as SkipRunSteps asks"
	} else {
		line += ": the server has no image builder"
	}
	line += "); ENV and WORKDIR are applied"
	if unrun > 0 {
		line += fmt.Sprintf(", and %d build steps were accepted without running (SkipRunSteps)", unrun)
	}
	return line + "\n"
}
