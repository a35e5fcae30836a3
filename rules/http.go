package rules

import "time"

// Bounds of the sidecar's HTTP server (internal/api; docs/hardening.md).
const (
	// MaxRequestBodyBytes caps a request body (1 MiB); a route may raise it
	// for itself (the git bundle upload takes up to MaxGitBundleBytes).
	MaxRequestBodyBytes = 1 << 20
	// RequestHeaderTimeout bounds the wait for a request's headers.
	RequestHeaderTimeout = 10 * time.Second
	// RequestReadTimeout bounds reading a whole request, body included;
	// streaming routes lift it once authenticated.
	RequestReadTimeout = 30 * time.Second
	// BundleReadTimeout is the read deadline of a git bundle upload: 256 MiB
	// at about 0.5 MB/s.
	BundleReadTimeout = 10 * time.Minute
	// IdleConnTimeout closes keep-alive connections left idle this long.
	IdleConnTimeout = 2 * time.Minute
	// MinConns and MaxConns clamp the connection cap, which is half of
	// RLIMIT_NOFILE: the other half stays for services, git and terminals.
	MinConns = 32
	MaxConns = 4096
	// StreamConnsPercent is the share of the connection cap that long-lived
	// streams (SSE, terminal WebSockets) may hold together, and at least
	// MinFreeConns stay for everything else: streams never starve health
	// checks and short requests.
	StreamConnsPercent = 75
	MinFreeConns       = 8
	// MaxBundleUploads caps the POST /api/git/bundle uploads read at once
	// (each may take MaxGitBundleBytes and BundleReadTimeout).
	MaxBundleUploads = 2
	// MaxDiffPathBytes bounds the path of GET /api/git/diff (Linux's PATH_MAX).
	MaxDiffPathBytes = 4096
)
