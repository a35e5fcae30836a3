package apitype

// ExposeResponse is the body of POST /api/expose (200, and 502 with Error set).
type ExposeResponse struct {
	Success     bool   `json:"success,omitempty"`
	Error       string `json:"error,omitempty"`
	ExposedPort int    `json:"exposedPort"`
}

// ExposeStatus is the body of GET /api/expose: where the preview site goes.
type ExposeStatus struct {
	// ExposedPort is the port set by POST /api/expose, null when none.
	ExposedPort *int `json:"exposedPort"`
	// UpstreamPort is where the preview proxy sends new requests, null when
	// nothing is exposed and no fallback port accepts connections.
	UpstreamPort *int `json:"upstreamPort"`
	// Upstream is "exposed", "fallback" or "none".
	Upstream string `json:"upstream"`
	// PreviewAddr is the preview proxy's listen address.
	PreviewAddr string `json:"previewAddr"`
	// CaddyRouted reports whether Caddy's running config sends the preview
	// site to the preview proxy (the snippet is loaded or the main Caddyfile
	// already does).
	CaddyRouted bool `json:"caddyRouted"`
	// CaddyError says why CaddyRouted could not be established.
	CaddyError string `json:"caddyError,omitempty"`
}
