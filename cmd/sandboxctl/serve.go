package main

// `sandboxctl serve --protocol NAME`: a server of another platform's protocol over the
// local engine. The servers are in their own files (serve_modal.go, serve_e2b.go) and
// listed in serveProtocols.

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
var serveProtocols = map[string]func(ctx context.Context, o serveOptions) error{
	"modal": serveModal,
	"e2b":   serveE2B,
}

// serveImage are the protocols that honour --image; the others refuse it.
var serveImage = map[string]bool{"e2b": true}

// ServeOptions are the inputs of `serve`.
type ServeOptions struct {
	Ctx     context.Context
	Factory *Factory
	// Protocol is --protocol, a key of serveProtocols.
	Protocol string
	// Addr is --addr, HOST:PORT.
	Addr string
	// Image is --image, for the protocols in serveImage.
	Image string
}

// NewCmdServe builds `serve`.
func NewCmdServe(f *Factory, runF func(*ServeOptions) error) *cobra.Command {
	o := &ServeOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "serve --protocol NAME [--addr HOST:PORT] [--image REF]",
		Short: "Serve a platform's protocol (modal, e2b) over the local engine",
		Long: "Serve a sandbox platform's API over the local engine, so its SDKs and CLIs run\n" +
			"against sandboxes on this machine. Runs until interrupted. stdout gets the\n" +
			"`export` lines the SDKs and `sandboxctl -p NAME` need; eval them in another shell.",
		Example: "  sandboxctl serve --protocol modal --addr 127.0.0.1:8080 > modal.env &\n" +
			"  . ./modal.env && sandboxctl -p modal create\n" +
			"  sandboxctl serve --protocol e2b --image sandbox",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ctx = cmd.Context()
			if _, ok := serveProtocols[o.Protocol]; !ok {
				return usageError{errorf("unknown protocol %q (known: %s)", o.Protocol, knownNames(serveProtocols))}
			}
			if o.Image != "" && !serveImage[o.Protocol] {
				return usageError{errorf("--image is not supported by --protocol %s", o.Protocol)}
			}
			return runOr(o, runF, serveRun)
		},
	}
	cmd.Flags().StringVar(&o.Protocol, "protocol", "", "protocol to serve: modal or e2b")
	cmd.Flags().StringVar(&o.Addr, "addr", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().StringVar(&o.Image, "image", "", "image (`REF|ID`) of the data dir's store that the default template boots (e2b: base; default: the engine's default root)")
	_ = cmd.MarkFlagRequired("protocol")
	return cmd
}

func serveRun(o *ServeOptions) error {
	a := o.Factory
	images, err := a.openImageStore()
	if err != nil {
		return err
	}
	b, err := openBackend(o.Ctx, "local", backendOptions{DataDir: a.dataDir, Unisolated: a.unisolated,
		Getenv: a.getenv, Stderr: a.stderr, Logger: a.logger(), Images: images})
	if err != nil {
		return err
	}
	defer openedBackend{b}.close()
	return serveProtocols[o.Protocol](o.Ctx, serveOptions{Engine: b.Engine, Images: images, Image: o.Image, Addr: o.Addr, DataDir: a.dataDir,
		Getenv: a.getenv, Stdout: a.stdout, Stderr: a.stderr, Logger: a.logger(),
		Ready: func(addr string) { a.progress("serving %s on %s", o.Protocol, addr) }})
}
