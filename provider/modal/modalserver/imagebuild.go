package modalserver

// Image builds: with Options.Builder on an engine that boots images, every registry
// image (its Dockerfile commands, or none) is built into an image the engine boots
// (Spec.Image): the base from the store, a missing Debian base with mmdebstrap. The build runs
// in the background; ImageGetOrCreate answers without a result and the SDK waits with
// ImageJoinStreaming, which streams the build's output and then its result.

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imagedef "github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/debian"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// ImageBuilder builds Modal images (a registry base plus Dockerfile commands, as the
// SDKs send them) into images the server's engine boots.
type ImageBuilder interface {
	// CheckImage says why from and commands cannot be built, without building: nil
	// when they can.
	CheckImage(ctx context.Context, from string, commands []string) error
	// BuildImage builds commands on from and returns the id the engine boots
	// (engine.Spec.Image). Progress receives the build's output.
	BuildImage(ctx context.Context, from string, commands []string, progress io.Writer) (string, error)
}

// StoreBuilder is the ImageBuilder of a local image store: commands are read with
// image.ParseCommands and built with build.Build (each step cached under its content
// key, so the same commands build once); a debian:<suite>[-slim] base the store lacks
// is built with mmdebstrap. Other registry bases must already be in the store
// (sandboxctl image import or pull).
type StoreBuilder struct {
	Store *store.Store
	// Runner runs RUN steps (build.EngineRunner on the local engine).
	Runner build.Runner
	Debian debian.Options
}

// CheckImage implements ImageBuilder.
func (b StoreBuilder) CheckImage(ctx context.Context, from string, commands []string) error {
	if _, err := imagedef.ParseCommands(from, commands); err != nil {
		return err
	}
	if _, err := b.Store.Get(ctx, from); err == nil {
		return nil
	}
	if _, _, ok := debian.ParseRef(from); ok {
		return nil
	}
	return fmt.Errorf("cannot pull registry image %q: it is not in the local image store and only debian:<suite>[-slim] bases are built here (put others in the store with sandboxctl image import or image pull)", from)
}

// BuildImage implements ImageBuilder.
func (b StoreBuilder) BuildImage(ctx context.Context, from string, commands []string, progress io.Writer) (string, error) {
	img, err := imagedef.ParseCommands(from, commands)
	if err != nil {
		return "", err
	}
	res, err := build.Build(ctx, img, build.Options{Store: b.Store, Runner: b.Runner, Debian: b.Debian, Progress: progress})
	if err != nil {
		return "", err
	}
	return res.ID, nil
}

// maxBuildLog bounds the output a build keeps for ImageJoinStreaming (the newest).
const maxBuildLog = 1 << 20

// imageBuild is one build in progress or ended; its output is a window of entries
// (one per write) numbered from 1, the ids ImageJoinStreaming resumes from.
type imageBuild struct {
	mu      sync.Mutex
	entries []string
	first   int // number of entries[0]
	size    int
	changed chan struct{} // closed and replaced on every change
	done    bool
	err     error
}

func newImageBuild() *imageBuild { return &imageBuild{first: 1, changed: make(chan struct{})} }

// Write adds one entry of output.
func (b *imageBuild) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entries = append(b.entries, string(p))
	b.size += len(p)
	for b.size > maxBuildLog && len(b.entries) > 1 {
		b.size -= len(b.entries[0])
		b.entries = b.entries[1:]
		b.first++
	}
	b.notify()
	return len(p), nil
}

func (b *imageBuild) finish(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.err = true, err
	b.notify()
}

func (b *imageBuild) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// since returns the entries after number last (and the number of the newest), a
// channel closed on the next change, and whether the build has ended (with its error).
func (b *imageBuild) since(last int) (entries []string, newest int, changed <-chan struct{}, done bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := max(last+1, b.first)
	newest = b.first + len(b.entries) - 1
	if from <= newest {
		entries = append(entries, b.entries[from-b.first:]...)
	}
	return entries, max(newest, last), b.changed, b.done, b.err
}

// wait waits for the build to end (or ctx) and returns its error.
func (b *imageBuild) wait(ctx context.Context) error {
	for {
		_, _, changed, done, err := b.since(0)
		if done {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// running says whether the build is still going or succeeded (a failed one is retried).
func (b *imageBuild) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.done || b.err == nil
}

// canBuild says whether the server builds images itself (SkipRunSteps asks it not to).
func (s *Server) canBuild() bool {
	return s.o.Builder != nil && !s.o.SkipRunSteps && s.o.Engine.Capabilities().Images
}

// startBuild builds img (its id set) unless a build of it is running or succeeded.
func (s *Server) startBuild(img *image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.builds[img.id]; b != nil && b.running() {
		return
	}
	b := newImageBuild()
	s.builds[img.id] = b
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fmt.Fprintf(b, "local Modal server: building %s with %d commands\n", img.tag, len(img.commands))
		id, err := s.o.Builder.BuildImage(s.base, img.tag, img.commands, b)
		if err == nil {
			img.built = id
			err = s.addImage(img)
		}
		if err != nil {
			s.log.Warn("image build", "image_id", img.id, "err", err)
		}
		b.finish(err)
	}()
}

// joinBuild streams b's output after req's last entry and, once it ends, its result;
// it returns without a result after req's timeout (the SDK joins again).
func joinBuild(req *pb.ImageJoinStreamingRequest, b *imageBuild, stream grpc.ServerStreamingServer[pb.ImageJoinStreamingResponse]) error {
	last, _ := strconv.Atoi(req.GetLastEntryId())
	wait := time.Duration(req.GetTimeout()) * time.Second
	if wait <= 0 || wait > time.Minute {
		wait = 55 * time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		entries, newest, changed, done, err := b.since(last)
		if len(entries) > 0 {
			logs := make([]*pb.TaskLogs, len(entries))
			for i, e := range entries {
				logs[i] = pb.TaskLogs_builder{Data: e, FileDescriptor: pb.FileDescriptor_FILE_DESCRIPTOR_STDOUT}.Build()
			}
			if err := stream.Send(pb.ImageJoinStreamingResponse_builder{TaskLogs: logs, EntryId: strconv.Itoa(newest)}.Build()); err != nil {
				return err
			}
			last = newest
		}
		if done {
			res := pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}
			if err != nil {
				res = pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_FAILURE,
					Exception: "local Modal server: image build: " + err.Error()}
			}
			return stream.Send(pb.ImageJoinStreamingResponse_builder{Result: res.Build(), EntryId: strconv.Itoa(last), Eof: true}.Build())
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil
		case <-stream.Context().Done():
			return grpcError(stream.Context().Err())
		}
	}
}

// builtImage is the image id names. One whose build still runs is waited for, so a
// client that creates without joining the build (raw gRPC) gets its sandbox once the
// image is there; a failed build is refused with its error.
func (s *Server) builtImage(ctx context.Context, id string) (*image, error) {
	s.mu.Lock()
	img, b := s.images[id], s.builds[id]
	s.mu.Unlock()
	if img == nil && b != nil {
		if err := b.wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, grpcError(ctx.Err())
			}
			return nil, localOnly("image build: %v", err)
		}
		s.mu.Lock()
		img = s.images[id]
		s.mu.Unlock()
	}
	if img == nil {
		return nil, status.Errorf(codes.NotFound, "Image '%s' not found", id)
	}
	return img, nil
}
