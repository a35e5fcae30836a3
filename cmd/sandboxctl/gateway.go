package main

// `sandboxctl gateway`: the egress proxy of package egress served to sandboxes of
// remote engines (Modal, E2B), which reach it as their HTTPS_PROXY with a per-sandbox
// credential; engine adapters register sandboxes on the admin listener. It prints the
// variables (provider.EnvEgressGateway…) with which `sandboxctl -p modal|e2b create
// --secret` registers its sandboxes there (gatewayFromEnv).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
)

// GatewayOptions are the inputs of gateway.
type GatewayOptions struct {
	Ctx     context.Context
	Factory *Factory
	// Addr is where sandboxes reach the proxy; Admin is where adapters register.
	Addr, Admin string
	// Public is the proxy's address as sandboxes reach it, printed; "" is Addr's
	// listener, its host this machine's first non-loopback address when unspecified.
	Public string
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
		Use:   "gateway [--token-env NAME] [--addr HOST:PORT] [--public HOST:PORT] [--admin HOST:PORT]",
		Short: "Serve the secrets' egress proxy to sandboxes of remote engines",
		Long: "Serve the egress proxy that puts secrets' values in place of their placeholders\n" +
			"to sandboxes that reach it as their HTTPS_PROXY (Modal, E2B), each with its own\n" +
			"credential. Engine adapters register sandboxes on --admin with the token in\n" +
			"$NAME. It prints the export lines with which `sandboxctl -p modal|e2b create\n" +
			"--secret` uses it (" + provider.EnvEgressGateway + ", " + provider.EnvEgressGatewayAdminURL + ",\n" +
			provider.EnvEgressGatewayAdminToken + "). Runs until interrupted.",
		Example: "  export " + provider.EnvEgressGatewayAdminToken + "=\"$(head -c 24 /dev/urandom | base64)\"\n" +
			"  sandboxctl gateway --public gw.example.com:8090 > gateway.env &\n" +
			"  . ./gateway.env; N4_KEY=… sandboxctl -p modal create --secret N4_KEY:api.example.com",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Token = f.getenv(tokenEnv); len(o.Token) < 16 {
				return usageError{errorf("--token-env %s: the variable must hold an admin token of at least 16 characters", tokenEnv)}
			}
			o.Ctx, o.Factory = cmd.Context(), f
			return runOr(o, runF, gatewayRun)
		},
	}
	cmd.Flags().StringVar(&o.Addr, "addr", "0.0.0.0:8090", "address sandboxes reach the proxy on")
	cmd.Flags().StringVar(&o.Public, "public", "", "address sandboxes reach the proxy at, printed (default: --addr's, an unspecified host replaced by this machine's first non-loopback address)")
	cmd.Flags().StringVar(&o.Admin, "admin", "127.0.0.1:8091", "address of the registration API (keep it off the sandboxes' network)")
	cmd.Flags().StringVar(&tokenEnv, "token-env", provider.EnvEgressGatewayAdminToken, "environment variable holding the registration API's token")
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
	public := o.Public
	if public == "" {
		public = reachable(pl.Addr().(*net.TCPAddr))
	}
	// What `sandboxctl -p modal|e2b create --secret` needs (gatewayFromEnv).
	for _, kv := range [][2]string{{provider.EnvEgressGateway, public},
		{provider.EnvEgressGatewayAdminURL, "http://" + al.Addr().String()}, {provider.EnvEgressGatewayAdminToken, o.Token}} {
		fmt.Fprintf(o.Factory.stdout, "export %s=%s\n", kv[0], shellQuote(kv[1]))
	}
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

// reachable is a's address with an unspecified host replaced by this machine's first
// non-loopback, non-link-local IPv4 address (a's own when there is none).
func reachable(a *net.TCPAddr) string {
	if !a.IP.IsUnspecified() {
		return a.String()
	}
	nets, _ := egress.LocalNets()
	for _, n := range nets {
		if ip := n.Addr(); ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			return netip.AddrPortFrom(ip, uint16(a.Port)).String()
		}
	}
	return a.String()
}

// gatewayFromEnv is the egress gateway the Modal and E2B backends register their
// sandboxes' secrets with, from the variables `sandboxctl gateway` prints; nil when
// none is set (a spec with secrets is then refused), an error naming what is missing
// when only some are.
func gatewayFromEnv(getenv func(string) string) (*gateway.Engine, error) {
	names := []string{provider.EnvEgressGateway, provider.EnvEgressGatewayAdminURL, provider.EnvEgressGatewayAdminToken}
	var set, missing []string
	for _, n := range names {
		if getenv(n) != "" {
			set = append(set, n)
		} else {
			missing = append(missing, n)
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("egress gateway: %s set but %s not: set all three (sandboxctl gateway prints them) or none",
			strings.Join(set, ", "), strings.Join(missing, ", "))
	}
	addr := getenv(provider.EnvEgressGateway)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("egress gateway: %s=%q: want host:port: %w", provider.EnvEgressGateway, addr, err)
	}
	return &gateway.Engine{Addr: addr, Registrar: &gateway.Client{URL: getenv(provider.EnvEgressGatewayAdminURL),
		Token: getenv(provider.EnvEgressGatewayAdminToken), HTTP: &http.Client{Timeout: time.Minute}}}, nil
}
