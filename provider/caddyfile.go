package provider

import (
	"fmt"
	"strings"
)

// defaultCaddyfile is the main Caddyfile of a sandbox: the preview proxy on
// PortPreview routes /_proliferate/mcp/* to sandbox-mcp, /_proliferate/vscode/* to
// openvscode-server behind forward_auth, other /_proliferate/* paths to the sandbox
// daemon, then the user snippet written by port exposure, then the dev-server
// fallbacks. It is the one place the boot plan gets its Caddyfile from.
func defaultCaddyfile(p Paths) string {
	var upstreams []string
	for _, port := range DevServerPorts() {
		upstreams = append(upstreams, fmt.Sprintf("localhost:%d", port))
	}
	return fmt.Sprintf(`{
    admin off
}

:%[1]d {
    # sandbox-mcp API
    handle_path /_proliferate/mcp/* {
        reverse_proxy localhost:%[2]d
    }

    # openvscode-server, authenticated by sandbox-mcp
    handle_path /_proliferate/vscode/* {
        forward_auth localhost:%[2]d {
            uri /api/auth/check
            copy_headers Authorization
        }
        reverse_proxy localhost:%[3]d
        header {
            -X-Frame-Options
            -Content-Security-Policy
        }
    }

    # sandbox daemon endpoints (fs, pty, ports, health, events, token refresh)
    handle /_proliferate/* {
        reverse_proxy localhost:%[4]d
    }

    # Populated by port exposure; its bare handle takes priority over the fallback.
    # Starts empty.
    import %[5]s

    handle {
        reverse_proxy %[6]s {
            lb_policy first
            lb_try_duration 1s
            lb_try_interval 100ms
            fail_duration 2s
        }
        header {
            -X-Frame-Options
            -Content-Security-Policy
        }
    }
}
`, PortPreview, PortSandboxMCP, PortVSCode, PortSandboxDaemon, p.UserCaddyFile(), strings.Join(upstreams, " "))
}
