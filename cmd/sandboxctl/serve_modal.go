package main

// The Modal protocol (`sandboxctl serve --protocol modal`) and the Modal backend
// (`sandboxctl --provider modal …`).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// serveModal serves Modal's gRPC protocol over the local engine until ctx is done. It
// prints the `export` lines a Modal SDK needs. The server accepts one token pair, kept
// in <data-dir>/modal-token (0600, made on the first serve); the tunnels' CA
// certificate is written to <data-dir>/modal-tunnel-ca.pem. Images with build steps
// (RUN, …) are built into the image store (<data-dir>/images) on an isolated engine;
// SANDBOXCTL_MODAL_SKIP_RUN=1 accepts such steps unrun instead (the host's userland).
func serveModal(ctx context.Context, o serveOptions) error {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return err
	}
	tok, err := modalserver.LoadOrCreateToken(o.DataDir)
	if err != nil {
		return err
	}
	srv, err := modalserver.New(modalserver.Options{Engine: o.Engine, Logger: o.Logger, StateDir: o.DataDir, Token: tok,
		SkipRunSteps: o.Getenv(modalserver.EnvSkipRunSteps) == "1", Builder: modalBuilder(o)})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.Addr)
	if err != nil {
		srv.Close()
		return err
	}
	addr := l.Addr().String()
	ca := filepath.Join(o.DataDir, "modal-tunnel-ca.pem")
	if err := os.WriteFile(ca, srv.CACertPEM(), 0o644); err != nil {
		l.Close()
		srv.Close()
		return err
	}
	// Everything the SDKs and `sandboxctl -p modal` need; the app name is any name
	// (the server makes the app on first use).
	for _, kv := range [][2]string{{provider.EnvModalServerURL, "http://" + addr}, {provider.EnvModalTokenID, tok.ID},
		{provider.EnvModalTokenSecret, tok.Secret}, {provider.EnvModalTunnelCA, ca}, {provider.EnvModalAppName, "sandboxctl"}} {
		fmt.Fprintf(o.Stdout, "export %s=%s\n", kv[0], shellQuote(kv[1]))
	}
	if o.Ready != nil {
		o.Ready(addr)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		srv.Close()
		return <-errc
	case err := <-errc:
		srv.Close()
		return err
	}
}

// modalBuilder builds the server's images into the image store, their RUN steps in
// build sandboxes of the local engine; nil without a store or an engine that can.
func modalBuilder(o serveOptions) modalserver.ImageBuilder {
	be, ok := o.Engine.(build.BuildEngine)
	if o.Images == nil || !ok {
		return nil
	}
	return modalserver.StoreBuilder{Store: o.Images, Runner: build.EngineRunner{Engine: be, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}}
}

// newModalBackend drives Modal (or a local Modal server: the SDK reads
// MODAL_SERVER_URL from the environment) with the MODAL_* settings. MODAL_TUNNEL_CA,
// when set, is a PEM file trusted for the tunnels (the local server's certificate).
func newModalBackend(ctx context.Context, o backendOptions) (*backend, error) {
	mo := modal.Options{Getenv: o.Getenv, Logger: o.Logger}
	if ca := o.Getenv(provider.EnvModalTunnelCA); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("read MODAL_TUNNEL_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("MODAL_TUNNEL_CA: no certificate in " + ca)
		}
		mo.TLS = &tls.Config{RootCAs: pool}
	}
	gw, err := gatewayFromEnv(o.Getenv)
	if err != nil {
		return nil, err
	}
	mo.Gateway = gw
	return newBackend(modal.NewEngine(mo), o, provider.Options{Kind: provider.KindModal, Timeout: provider.SandboxTimeout(o.Getenv)})
}

// shellQuote quotes v for a POSIX shell when it holds anything but plain characters.
func shellQuote(v string) string {
	plain := v != ""
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:@%+=,", c)) {
			plain = false
		}
	}
	if plain {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}
