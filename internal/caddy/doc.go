// Package caddy keeps the sandbox's Caddy routing its preview site
// (rules.PortPreview) to the sidecar's preview proxy. internal/expose is its
// only importer; it knows nothing of HTTP requests to the sidecar.
//
// Caddy runs as a process of its own, started by the image, and this package
// never starts or signals it. It talks to Caddy's admin API (a loopback
// address or a unix socket, see parseAdmin), and writes one file: the snippet
// the main Caddyfile imports, built by package caddyfile from typed values.
//
// Manager.Ensure is idempotent: when Caddy's running configuration already
// dials the preview proxy it changes nothing (no reload, no dropped
// connection). Otherwise it validates the new snippet with `caddy validate`
// in a folder of its own, writes it atomically, and loads the main Caddyfile
// through the admin API's /load; when the load fails, the previous snippet (if
// there was one) is put back.
package caddy
