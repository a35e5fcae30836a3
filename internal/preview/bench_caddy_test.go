package preview

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/caddy/caddytest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// BenchmarkThroughCaddy compares the two preview paths a browser request can
// take: Caddy → app (the old snippet) and Caddy → preview proxy → app.
func BenchmarkThroughCaddy(b *testing.B) {
	caddytest.Binary(b)
	direct, proxied := benchServer(b)
	dir := b.TempDir()
	socket := caddytest.SocketPath(b)
	siteDirect := caddytest.Addr(testutil.FreePort(b))
	siteProxy := caddytest.Addr(testutil.FreePort(b))
	cf := fmt.Sprintf("{\n    admin unix/%s\n}\n\nhttp://%s {\n    bind 127.0.0.1\n    reverse_proxy %s\n}\n\nhttp://%s {\n    bind 127.0.0.1\n    reverse_proxy %s\n}\n",
		socket, siteDirect, strings.TrimPrefix(direct, "http://"), siteProxy, strings.TrimPrefix(proxied, "http://"))
	caddytest.Start(b, dir, []byte(cf), socket, siteProxy)
	if _, err := os.Stat(socket); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	for _, tt := range []struct {
		name, site string
	}{{"caddy-app", siteDirect}, {"caddy-proxy-app", siteProxy}} {
		b.Run(tt.name+"/request", func(b *testing.B) { benchGet(b, client, "http://"+tt.site+"/", 0) })
		b.Run(tt.name+"/1MiB", func(b *testing.B) { benchGet(b, client, "http://"+tt.site+"/big", 1<<20) })
	}
}
