package main

// `sandboxctl gateway`: the egress proxy of package egress served to sandboxes of
// remote engines (Modal, E2B), which reach it as their HTTPS_PROXY with a per-sandbox
// credential; engine adapters register sandboxes on the admin listener.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
)

// GatewayOptions are the inputs of gateway.
type GatewayOptions struct {
	Ctx     context.Context
	Factory *Factory
	// Addr is where sandboxes reach the proxy; Admin is where adapters register.
	Addr, Admin string
	// Token is the admin token, read from the variable --token-env names.
	Token string
	// Ready, when set, is called with the two listeners' addresses.
	Ready func(addr, admin string)
}

// NewCmdGateway builds `gateway`.
func NewCmdGateway(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	o := &GatewayOptions{}
	var tokenEnv string
	cmd := &cobra.Command{
		Use:   "gateway --token-env NAME [--addr HOST:PORT] [--admin HOST:PORT]",
		Short: "Serve the secrets' egress proxy to sandboxes of remote engines",
		Long: "Serve the egress proxy that puts secrets' values in place of their placeholders\n" +
			"to sandboxes that reach it as their HTTPS_PROXY (Modal, E2B), each with its own\n" +
			"credential. Engine adapters register sandboxes on --admin with the token in\n" +
			"$NAME. Runs until interrupted.",
		Example: "  GATEWAY_ADMIN_TOKEN=\"$(head -c 24 /dev/urandom | base64)\" sandboxctl gateway --token-env GATEWAY_ADMIN_TOKEN",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Token = f.getenv(tokenEnv); len(o.Token) < 16 {
				return usageError{errorf("--token-env %s: the variable must hold an admin token of at least 16 characters", tokenEnv)}
			}
			o.Ctx, o.Factory = cmd.Context(), f
			return runOr(o, runF, gatewayRun)
		},
	}
	cmd.Flags().StringVar(&o.Addr, "addr", "0.0.0.0:8090", "address sandboxes reach the proxy on")
	cmd.Flags().StringVar(&o.Admin, "admin", "127.0.0.1:8091", "address of the registration API (keep it off the sandboxes' network)")
	cmd.Flags().StringVar(&tokenEnv, "token-env", "", "environment variable holding the registration API's token")
	return cmd
}

func gatewayRun(o *GatewayOptions) error {
	g := gateway.New(gateway.Config{Log: o.Factory.logger()})
	defer g.Close()
	admin, err := gateway.AdminHandler(g, o.Token)
	if err != nil {
		return err
	}
	pl, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	al, err := net.Listen("tcp", o.Admin)
	if err != nil {
		pl.Close()
		return err
	}
	ps := &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second}
	as := &http.Server{Handler: admin, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- ps.Serve(pl) }()
	go func() { errc <- as.Serve(al) }()
	o.Factory.progress("egress gateway on %s, registration on %s", pl.Addr(), al.Addr())
	if o.Ready != nil {
		o.Ready(pl.Addr().String(), al.Addr().String())
	}
	select {
	case <-o.Ctx.Done():
	case err = <-errc:
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.Ctx), 5*time.Second)
	defer cancel()
	_ = ps.Shutdown(ctx)
	_ = as.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
