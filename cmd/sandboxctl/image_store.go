package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/debian"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/progress"
)

// imageStoreDir is the local image store inside the data dir.
func imageStoreDir(dataDir string) string { return filepath.Join(dataDir, "images") }

// openImageStore opens the data dir's image store; Remove asks the local engine which
// live sandboxes boot from an image. An image command may be the first to use the data
// dir: it makes it private (0700) as the engine does, also when it exists with a laxer
// mode.
func (a *Factory) openImageStore() (*store.Store, error) {
	if err := os.MkdirAll(a.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create the data dir: %w", err)
	}
	if err := os.Chmod(a.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("make the data dir %s private: %w", a.dataDir, err)
	}
	return store.Open(store.Options{Dir: imageStoreDir(a.dataDir), InUse: a.imageUsers})
}

// imageUsers are the live local sandboxes that booted from image id.
func (a *Factory) imageUsers(ctx context.Context, id string) ([]string, error) {
	e, err := local.NewEngine(local.EngineOptions{DataDir: a.dataDir, Unisolated: a.unisolated, Logger: a.logger()})
	if err != nil {
		return nil, fmt.Errorf("check which sandboxes use the image: %w", err)
	}
	defer e.Close()
	list, err := e.List(ctx)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, in := range list {
		if in.Image == id && in.State != engine.StateDead {
			users = append(users, in.ID)
		}
	}
	return users, nil
}

// ImageBuildOptions are the inputs of `image build`.
type ImageBuildOptions struct {
	Ctx     context.Context
	Factory *Factory
	// File is -f, a JSON definition; empty means the default sandbox image.
	File string
	// ContextDir is --context, the folder copy steps' sources are relative to.
	ContextDir string
	// Binaries are the --binary NAME=PATH values.
	Binaries []string
	// Tag is --tag, the image's name.
	Tag string
	// Mirror is --mirror, the Debian mirror of a debian base.
	Mirror string
}

// NewCmdImageBuild builds `image build`.
func NewCmdImageBuild(f *Factory, runF func(*ImageBuildOptions) error) *cobra.Command {
	o := &ImageBuildOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "build [-f image.json] [--context DIR] [--binary NAME=PATH]... [--tag NAME]",
		Short: "Build an image into the local image store",
		Long: "Build the sandbox image (or the JSON definition given with -f) into the data dir's image\n" +
			"store and print its id. Each step becomes an image cached under its content key: a\n" +
			"second build does no work and prints the same id; a changed step rebuilds itself\n" +
			"and the steps after it. A debian:<suite>[-slim] base the store lacks is built once\n" +
			"with mmdebstrap from the machine's Debian mirror (minutes on a busy machine). Run and\n" +
			"apt steps run in a build sandbox on the local engine. Progress goes to stderr: a bar\n" +
			"with the step and the elapsed time on a terminal, plain lines otherwise.",
		Example: "  sandboxctl image build\n" +
			"  sandboxctl image build -f image.json --context . --tag myimage\n" +
			"  sandboxctl image build --binary sandbox-mcp=dist/linux_amd64/sandbox-mcp --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			for _, kv := range o.Binaries {
				if name, p, ok := strings.Cut(kv, "="); !ok || name == "" || p == "" {
					return usageError{fmt.Errorf("--binary %q: want NAME=PATH", kv)}
				}
			}
			return runOr(o, runF, imageBuildRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.File, "file", "f", "", "image definition in JSON (default: the sandbox image)")
	fl.StringVar(&o.ContextDir, "context", ".", "folder the copy steps' sources are relative to")
	fl.StringArrayVar(&o.Binaries, "binary", nil, "file of a binary step, NAME=PATH (repeatable; default: found like create's)")
	fl.StringVar(&o.Tag, "tag", "", "name the image (default: the definition's name)")
	fl.StringVar(&o.Mirror, "mirror", "", "Debian mirror for a debian base (default: the machine's apt sources)")
	return cmd
}

func imageBuildRun(o *ImageBuildOptions) error {
	a := o.Factory
	img, err := loadDefinition(o.File)
	if err != nil {
		return err
	}
	if o.Tag != "" {
		img.Name = o.Tag
	}
	src, err := a.buildSources(img, o.ContextDir, o.Binaries)
	if err != nil {
		return err
	}
	s, err := a.openImageStore()
	if err != nil {
		return err
	}
	rep := a.reporter()
	defer rep.Done()
	opts := build.Options{Store: s, Sources: src, Progress: rep, Debian: debian.Options{Mirror: o.Mirror, Log: a.debianLog(rep)}}
	r, done, err := newBuildRunner(a, s)
	if err != nil {
		return err
	}
	defer done()
	opts.Runner = r
	res, err := build.Build(o.Ctx, img, opts)
	rep.Done()
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(res)
	}
	fmt.Fprintln(a.stdout, res.ID)
	return nil
}

// debianLog is where mmdebstrap's output goes: into the bar on a terminal,
// where it shows that the longest step moves; as lines only with --verbose.
func (a *Factory) debianLog(rep *progress.Reporter) io.Writer {
	if a.verbose || progress.IsTerminal(a.stderr) {
		return rep
	}
	return nil
}

// buildSources are the files of img's copy and binary steps: --binary NAME=PATH, else
// the binary found the way create finds it.
func (a *Factory) buildSources(img image.Image, contextDir string, binaries []string) (image.Sources, error) {
	src := image.Sources{Context: contextDir, Binaries: map[string]string{}}
	for _, kv := range binaries {
		name, p, ok := strings.Cut(kv, "=")
		if !ok || name == "" || p == "" {
			return image.Sources{}, usageError{fmt.Errorf("--binary %q: want NAME=PATH", kv)}
		}
		src.Binaries[name] = p
	}
	for _, s := range img.Steps {
		if s.Kind != image.KindBinary || src.Binaries[s.Name] != "" {
			continue
		}
		env := "SANDBOXCTL_" + strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		if p := findBinary(a.getenv, env, s.Name); p != "" {
			src.Binaries[s.Name] = p
		}
	}
	return src, nil
}

// ImageListOptions are the inputs of `image list`.
type ImageListOptions struct {
	Ctx     context.Context
	Factory *Factory
	// All is --all: intermediate images too.
	All bool
}

// NewCmdImageList builds `image list`.
func NewCmdImageList(f *Factory, runF func(*ImageListOptions) error) *cobra.Command {
	o := &ImageListOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "list [--all]",
		Short: "List the images in the local image store",
		Long: "List the images in the local image store: named images and unnamed ones nothing\n" +
			"builds on; --all adds a build's intermediate images (one per step).",
		Example: "  sandboxctl image list\n  sandboxctl image list --all --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			return runOr(o, runF, imageListRun)
		},
	}
	cmd.Flags().BoolVarP(&o.All, "all", "a", false, "also list intermediate images")
	return cmd
}

func imageListRun(o *ImageListOptions) error {
	a := o.Factory
	s, err := a.openImageStore()
	if err != nil {
		return err
	}
	list, err := s.List(o.Ctx)
	if err != nil {
		return err
	}
	if !o.All {
		list = withoutIntermediates(list)
	}
	if a.json {
		if list == nil {
			list = []store.Info{}
		}
		return a.printJSON(list)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAMES\tLAYERS\tSIZE")
	for _, in := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", in.ID[:12], strings.Join(in.Names, ","), len(in.Layers), humanBytes(in.Size))
	}
	return tw.Flush()
}

// withoutIntermediates drops unnamed images that other images build on.
func withoutIntermediates(list []store.Info) []store.Info {
	parents := map[string]bool{}
	for _, in := range list {
		parents[in.Parent] = true
	}
	out := list[:0]
	for _, in := range list {
		if len(in.Names) > 0 || !parents[in.ID] {
			out = append(out, in)
		}
	}
	return out
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ImageRefsOptions are the inputs of `image rm` and `image pull`.
type ImageRefsOptions struct {
	Ctx     context.Context
	Factory *Factory
	// Refs are the image references (names, ids or id prefixes; pull: one registry reference).
	Refs []string
}

// NewCmdImageRm builds `image rm`.
func NewCmdImageRm(f *Factory, runF func(*ImageRefsOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "rm REF...",
		Short: "Remove images (by name or id) and what only they use",
		Long: "Remove images by name, id or id prefix, with their untagged ancestors that no other\n" +
			"image builds on (a build's intermediate images and their cache), then the layers and\n" +
			"blobs no image uses. An image that another image was built on, or that a live sandbox\n" +
			"booted from, is refused.",
		Example: "  sandboxctl image rm sandbox\n  sandboxctl image rm 3f2a9c1b",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(&ImageRefsOptions{Ctx: cmd.Context(), Factory: f, Refs: args}, runF, imageRmRun)
		},
	}
}

func imageRmRun(o *ImageRefsOptions) error {
	s, err := o.Factory.openImageStore()
	if err != nil {
		return err
	}
	for _, ref := range o.Refs {
		ids, err := s.Remove(o.Ctx, ref)
		if err != nil {
			return imageError(ref, err)
		}
		for _, id := range ids {
			fmt.Fprintln(o.Factory.stdout, "removed", id)
		}
	}
	return nil
}

// ImageImportOptions are the inputs of `image import`.
type ImageImportOptions struct {
	Ctx     context.Context
	Factory *Factory
	// File is the tarball, "-" for stdin.
	File string
	// Name is --name, the imported image's name.
	Name string
}

// NewCmdImageImport builds `image import`.
func NewCmdImageImport(f *Factory, runF func(*ImageImportOptions) error) *cobra.Command {
	o := &ImageImportOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "import FILE|- [--name NAME]",
		Short: "Import an OCI image tarball into the local image store",
		Long: "Import an OCI image layout as a tar, optionally gzip-compressed (skopeo copy …\n" +
			"oci-archive:FILE, docker save of Docker 25+), and print the ids of its images. The\n" +
			"tarball's names are kept unless --name names its (single) image.",
		Example: "  sandboxctl image import debian.tar --name debian:bookworm-slim\n" +
			"  skopeo copy docker://alpine:3 oci-archive:/dev/stdout | sandboxctl image import -",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx, o.File = cmd.Context(), args[0]
			return runOr(o, runF, imageImportRun)
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", "", "name of the imported image")
	return cmd
}

func imageImportRun(o *ImageImportOptions) error {
	a := o.Factory
	var r io.Reader = a.stdin
	if o.File != "-" {
		f, err := os.Open(o.File)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	s, err := a.openImageStore()
	if err != nil {
		return err
	}
	a.progress("importing %s", o.File)
	ids, err := s.Import(o.Ctx, r, o.Name)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(ids)
	}
	for _, id := range ids {
		fmt.Fprintln(a.stdout, id)
	}
	return nil
}

// NewCmdImagePull builds `image pull`.
func NewCmdImagePull(f *Factory, runF func(*ImageRefsOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from a registry into the local image store",
		Long: "Pull an image for this machine's platform from its registry, Docker Hub unless the\n" +
			"reference names another, and print its id. The credentials of `docker login` are\n" +
			"used if there are any, else none. Where no registry is reachable, build a debian base\n" +
			"(image build) or import an OCI tarball made elsewhere (image import). Progress goes\n" +
			"to stderr: on a terminal a bar with the layer, its bytes and the elapsed time; plain\n" +
			"lines (one per layer begun and ended) otherwise.",
		Example: "  sandboxctl image pull debian:bookworm-slim\n  sandboxctl image pull ghcr.io/org/image:1.0",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(&ImageRefsOptions{Ctx: cmd.Context(), Factory: f, Refs: args}, runF, imagePullRun)
		},
	}
}

func imagePullRun(o *ImageRefsOptions) error {
	a := o.Factory
	s, err := a.openImageStore()
	if err != nil {
		return err
	}
	ref := o.Refs[0]
	rep := a.reporter()
	defer rep.Done()
	rep.Step("pulling %s", ref)
	id, err := s.Pull(o.Ctx, ref, store.PullOptions{Keychain: authn.DefaultKeychain, Progress: rep})
	rep.Done()
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, id)
	return nil
}
