package main

// The Modal protocol (`sandboxctl serve --protocol modal`) and the Modal backend
// (`sandboxctl --provider modal …`).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/provider/modal"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
)

func init() {
	serveProtocols["modal"] = serveModal
	backends["modal"] = newModalBackend
}

// serveModal serves Modal's gRPC protocol over the local engine until ctx is done. It
// prints the settings a Modal SDK needs and writes the tunnels' CA certificate to
// <data-dir>/modal-tunnel-ca.pem.
func serveModal(ctx context.Context, o serveOptions) error {
	srv, err := modalserver.New(modalserver.Options{Engine: o.Engine, Logger: o.Logger, StateDir: o.DataDir})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	ca := filepath.Join(o.DataDir, "modal-tunnel-ca.pem")
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		l.Close()
		return err
	}
	if err := os.WriteFile(ca, srv.CACertPEM(), 0o644); err != nil {
		l.Close()
		return err
	}
	fmt.Fprintf(o.Stdout, "MODAL_SERVER_URL=http://%s\nMODAL_TOKEN_ID=ak-local\nMODAL_TOKEN_SECRET=as-local\nMODAL_TUNNEL_CA=%s\n", addr, ca)
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

// newModalBackend drives Modal (or a local Modal server: the SDK reads
// MODAL_SERVER_URL from the environment) with the MODAL_* settings. MODAL_TUNNEL_CA,
// when set, is a PEM file trusted for the tunnels (the local server's certificate).
func newModalBackend(ctx context.Context, o backendOptions) (*backend, error) {
	p := modal.New(modal.Options{Getenv: o.Getenv, Logger: o.Logger})
	e := p.Engine()
	if ca := o.Getenv("MODAL_TUNNEL_CA"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("MODAL_TUNNEL_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("MODAL_TUNNEL_CA: no certificate in " + ca)
		}
		e.TLS = &tls.Config{RootCAs: pool}
	}
	return &backend{Engine: e, Provider: p, Close: e.Close}, nil
}
