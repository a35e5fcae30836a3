// Package api is the sidecar's HTTP API: routing, auth, CORS, JSON errors and the
// handlers of CONTRACT.md. It imports no leaf package (services, terminal,
// gitrepo, ports, expose): it uses them through the small interfaces it declares
// next to each handler, in wire types (apitype), and answers their failures from
// the status an internal/fault.Error carries; cmd/sandbox-mcp wires the concrete
// types.
package api
