// Package api is the sidecar's HTTP API: routing, auth, CORS, JSON errors and the
// handlers of CONTRACT.md. It depends on the leaf packages (services, terminal,
// caddy, ...) only through the small interfaces it declares next to each handler;
// cmd/sandbox-mcp wires the concrete types.
package api
