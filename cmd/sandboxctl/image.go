package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider/image"
)

// newCmdImage is `sandboxctl image …`: the sandbox image's definition and the local
// image store.
func newCmdImage(a *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build, import, list and remove local images; print the image's Dockerfile",
		Long: "The sandbox image is defined once, in Go (provider/image). `image build` builds it\n" +
			"(or a JSON definition) into the local image store in the data dir, one cached layer\n" +
			"per step; `image dockerfile` prints it as a Dockerfile (deploy/Dockerfile is that\n" +
			"output). Sandboxes boot from stored images with `sandboxctl create --image REF`.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newCmdImageBuild(a), newCmdImageList(a), newCmdImageRm(a), newCmdImageImport(a),
		newCmdImagePull(a), newCmdImageDockerfile(a))
	return cmd
}

func newCmdImageDockerfile(a *Factory) *cobra.Command {
	var e2b bool
	var file string
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
			img, err := loadDefinition(file)
			if err != nil {
				return err
			}
			if e2b {
				_, err = fmt.Fprint(a.stdout, img.E2BDockerfile())
				return err
			}
			_, err = fmt.Fprint(a.stdout, img.Dockerfile())
			return err
		},
	}
	cmd.Flags().BoolVar(&e2b, "e2b", false, "print the E2B template's Dockerfile")
	cmd.Flags().StringVarP(&file, "file", "f", "", "image definition in JSON (default: the sandbox image)")
	return cmd
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
