package main

// `sandboxctl serve --protocol NAME`: a server of another platform's protocol over the
// local engine. The Modal and E2B servers register themselves from their own files
// (serve_modal.go, serve_e2b.go) in an init function:
//
//	func init() { serveProtocols["modal"] = serveModal }

import (
	"context"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// serveOptions is what a protocol server gets.
type serveOptions struct {
	// Engine is the local engine the protocol serves.
	Engine engine.Engine
	// Addr is --addr, HOST:PORT.
	Addr string
	// DataDir is the engine's data dir (a server may keep its own state under it).
	DataDir string
	Getenv  func(string) string
	Stdout  io.Writer
	Stderr  io.Writer
	Logger  *slog.Logger
	// Ready, when set, is called with the address the server listens on.
	Ready func(addr string)
	// Images is the data dir's image store, which Engine boots images from.
	Images *store.Store
	// Image is --image: the image (a name or id in Images) the server's default
	// template boots, for the protocols in serveImage; empty: the engine's default root.
	Image string
}

// serveProtocols maps --protocol names to servers; a server runs until ctx is done.
var serveProtocols = map[string]func(ctx context.Context, o serveOptions) error{}

// serveImage are the protocols that honour --image; the others refuse it.
var serveImage = map[string]bool{}

func newCmdServe(a *Factory) *cobra.Command {
	var protocol, addr, image string
	cmd := &cobra.Command{
		Use:   "serve --protocol NAME [--addr HOST:PORT] [--image REF]",
		Short: "Serve a platform's protocol (modal, e2b) over the local engine",
		Long: "Serve a sandbox platform's API over the local engine, so its SDKs and CLIs run\n" +
			"against sandboxes on this machine. Runs until interrupted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			serve, ok := serveProtocols[protocol]
			if !ok {
				return usageError{errorf("unknown protocol %q (known: %s)", protocol, knownNames(serveProtocols))}
			}
			if image != "" && !serveImage[protocol] {
				return usageError{errorf("--image is not supported by --protocol %s", protocol)}
			}
			images, err := a.openImageStore()
			if err != nil {
				return err
			}
			b, err := openBackend(cmd.Context(), "local", backendOptions{DataDir: a.dataDir, Unisolated: a.unisolated,
				Getenv: a.getenv, Stderr: a.stderr, Logger: a.logger(), Images: images})
			if err != nil {
				return err
			}
			defer openedBackend{b}.close()
			return serve(cmd.Context(), serveOptions{Engine: b.Engine, Images: images, Image: image, Addr: addr, DataDir: a.dataDir,
				Getenv: a.getenv, Stdout: a.stdout, Stderr: a.stderr, Logger: a.logger(),
				Ready: func(addr string) { a.progress("serving %s on %s", protocol, addr) }})
		},
	}
	cmd.Flags().StringVar(&protocol, "protocol", "", "protocol to serve: modal or e2b")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().StringVar(&image, "image", "", "image (`REF|ID`) of the data dir's store that the default template boots (e2b: base; default: the engine's default root)")
	_ = cmd.MarkFlagRequired("protocol")
	return cmd
}
