package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider/image"
)

// NewCmdImage builds `image`: the sandbox image's definition and the local image store.
func NewCmdImage(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build, import, list and remove local images; print the image's Dockerfile",
		Long: "The sandbox image is defined once, in Go (provider/image). `image build` builds it\n" +
			"(or a JSON definition) into the local image store in the data dir, one cached layer\n" +
			"per step; `image dockerfile` prints it as a Dockerfile (deploy/Dockerfile is that\n" +
			"output). Sandboxes boot from stored images with `sandboxctl create --image REF`.",
		Example: "  sandboxctl image build --tag sandbox\n" +
			"  sandboxctl create --image sandbox",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(NewCmdImageBuild(f, nil), NewCmdImageList(f, nil), NewCmdImageRm(f, nil), NewCmdImageImport(f, nil),
		NewCmdImagePull(f, nil), NewCmdImageDockerfile(f, nil))
	return cmd
}

// ImageDockerfileOptions are the inputs of `image dockerfile`.
type ImageDockerfileOptions struct {
	Factory *Factory
	// File is -f, a JSON definition; empty means the default sandbox image.
	File string
	// E2B is --e2b: the E2B template's Dockerfile.
	E2B bool
}

// NewCmdImageDockerfile builds `image dockerfile`.
func NewCmdImageDockerfile(f *Factory, runF func(*ImageDockerfileOptions) error) *cobra.Command {
	o := &ImageDockerfileOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "dockerfile [--e2b] [-f image.json]",
		Short: "Print the sandbox image as a Dockerfile",
		Long: "Print the image as a Dockerfile: the default sandbox image, or the JSON definition\n" +
			"given with -f. deploy/Dockerfile is this command's output; --e2b prints the E2B\n" +
			"template's Dockerfile (amd64 binaries, no EXPOSE or CMD).",
		Example: "  sandboxctl image dockerfile > deploy/Dockerfile\n" +
			"  sandboxctl image dockerfile --e2b > e2b.Dockerfile",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOr(o, runF, imageDockerfileRun)
		},
	}
	cmd.Flags().BoolVar(&o.E2B, "e2b", false, "print the E2B template's Dockerfile")
	cmd.Flags().StringVarP(&o.File, "file", "f", "", "image definition in JSON (default: the sandbox image)")
	return cmd
}

func imageDockerfileRun(o *ImageDockerfileOptions) error {
	img, err := loadDefinition(o.File)
	if err != nil {
		return err
	}
	if o.E2B {
		_, err = fmt.Fprint(o.Factory.stdout, img.E2BDockerfile())
		return err
	}
	_, err = fmt.Fprint(o.Factory.stdout, img.Dockerfile())
	return err
}

// loadDefinition reads the JSON definition at file, or returns the default image.
func loadDefinition(file string) (image.Image, error) {
	if file == "" {
		return image.Default(), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return image.Image{}, err
	}
	img, err := image.Parse(data)
	if err != nil {
		return image.Image{}, usageError{fmt.Errorf("%s: %w", file, err)}
	}
	return img, nil
}
