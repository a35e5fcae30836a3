// Package config reads the sidecar's settings from the environment in one place.
// cmd/sandbox-mcp and cmd/proliferate import it; nothing else reads os.Getenv.
package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Defaults of the wire contract (CONTRACT.md, "Processes and defaults").
const (
	DefaultAddr           = "0.0.0.0:4000"
	DefaultWorkspaceDir   = "/home/user/workspace"
	DefaultStateDir       = "/tmp/proliferate"
	DefaultCaddySnippet   = "/home/user/.proliferate/caddy/user.caddy"
	DefaultCaddyAdmin     = "localhost:2019"
	DefaultCaddyfile      = "/home/user/Caddyfile"
	DefaultPreviewAddr    = "127.0.0.1:4001"
	DefaultPreviewURLFile = "/tmp/.proliferate_preview_url"
	DefaultEnvOverrides   = "/tmp/.proliferate_env.json"
	DefaultSidecarURL     = "http://127.0.0.1:4000"
)

// Config is every setting the sidecar and the CLI take from the environment.
type Config struct {
	// Addr is the API listen address.
	Addr string
	// Token is the bearer token; empty means every protected endpoint answers 401.
	Token string
	// WorkspaceDir is where services start by default and where git repos are found.
	WorkspaceDir string
	// StateDir holds state.json and logs/.
	StateDir string
	// CaddySnippet is the user snippet imported by the sandbox's Caddyfile.
	CaddySnippet string
	// CaddyAdmin is Caddy's admin endpoint: host:port or unix//path.
	CaddyAdmin string
	// Caddyfile is the main Caddyfile that a reload loads.
	Caddyfile string
	// PreviewAddr is the loopback listener of the preview reverse proxy.
	PreviewAddr string
	// PreviewURLFile is read by the MCP tool get_preview_url.
	PreviewURLFile string
	// EnvOverridesFile is read by `proliferate env apply`.
	EnvOverridesFile string
	// SidecarURL is where the CLI and the MCP mode reach the API.
	SidecarURL string
	// GatewayURL and SessionID locate the platform's actions gateway.
	GatewayURL string
	SessionID  string
	// MaxTerminals caps live terminal sessions (SANDBOX_MCP_MAX_TERMINALS);
	// 0 means the terminal package's default (64).
	MaxTerminals int
}

// StateFile is the path of the JSON state file.
func (c Config) StateFile() string { return filepath.Join(c.StateDir, "state.json") }

// LogDir is the folder of the service log files.
func (c Config) LogDir() string { return filepath.Join(c.StateDir, "logs") }

// Load builds a Config from getenv. cwd is the fallback workspace when neither
// WORKSPACE_DIR nor the default workspace exists.
func Load(getenv func(string) string, cwd string) (Config, error) {
	c := Config{
		Addr:             or(getenv("SANDBOX_MCP_ADDR"), DefaultAddr),
		Token:            or(getenv("SANDBOX_MCP_AUTH_TOKEN"), getenv("SERVICE_TO_SERVICE_AUTH_TOKEN")),
		StateDir:         or(getenv("SANDBOX_MCP_STATE_DIR"), DefaultStateDir),
		CaddySnippet:     or(getenv("SANDBOX_MCP_CADDY_SNIPPET"), DefaultCaddySnippet),
		CaddyAdmin:       or(getenv("SANDBOX_MCP_CADDY_ADMIN"), DefaultCaddyAdmin),
		Caddyfile:        or(getenv("SANDBOX_MCP_CADDYFILE"), DefaultCaddyfile),
		PreviewAddr:      or(getenv("SANDBOX_MCP_PREVIEW_ADDR"), DefaultPreviewAddr),
		PreviewURLFile:   DefaultPreviewURLFile,
		EnvOverridesFile: DefaultEnvOverrides,
		SidecarURL:       strings.TrimRight(or(getenv("PROLIFERATE_SANDBOX_MCP_URL"), urlForAddr(getenv("SANDBOX_MCP_ADDR"))), "/"),
		GatewayURL:       strings.TrimRight(getenv("PROLIFERATE_GATEWAY_URL"), "/"),
		SessionID:        getenv("PROLIFERATE_SESSION_ID"),
	}
	if v := getenv("SANDBOX_MCP_MAX_TERMINALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 4096 {
			return Config{}, fmt.Errorf("SANDBOX_MCP_MAX_TERMINALS=%q: want a number from 1 to 4096", v)
		}
		c.MaxTerminals = n
	}
	ws := getenv("WORKSPACE_DIR")
	if ws == "" {
		ws = DefaultWorkspaceDir
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		if cwd == "" {
			return Config{}, fmt.Errorf("workspace dir %q does not exist and no working directory is known", ws)
		}
		ws = cwd
	}
	abs, err := filepath.Abs(ws)
	if err != nil {
		return Config{}, fmt.Errorf("resolve workspace dir %q: %w", ws, err)
	}
	c.WorkspaceDir = abs
	if !filepath.IsAbs(c.StateDir) {
		sd, err := filepath.Abs(c.StateDir)
		if err != nil {
			return Config{}, fmt.Errorf("resolve state dir %q: %w", c.StateDir, err)
		}
		c.StateDir = sd
	}
	if getenv("SANDBOX_MCP_CADDY_SNIPPET") == "" && !isDir(filepath.Dir(filepath.Dir(filepath.Dir(DefaultCaddySnippet)))) {
		// Not a sandbox image (a laptop, CI): keep the snippet with the state
		// rather than creating /home/user.
		c.CaddySnippet = filepath.Join(c.StateDir, "caddy", "user.caddy")
	}
	return c, nil
}

// EnvWorkspaceDir is the workspace as `proliferate env` resolves it: WORKSPACE_DIR,
// else the default, with no fallback to the working directory.
func EnvWorkspaceDir(getenv func(string) string) string {
	return or(getenv("WORKSPACE_DIR"), DefaultWorkspaceDir)
}

// urlForAddr is the loopback URL of an API listening on addr (wildcard hosts
// become loopback); the default URL when addr is empty or unusable.
func urlForAddr(addr string) string {
	if addr == "" {
		return DefaultSidecarURL
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return DefaultSidecarURL
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func or(v, def string) string {
	if v != "" {
		return v
	}
	return def
}
