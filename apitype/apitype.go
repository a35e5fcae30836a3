// Package apitype holds the JSON wire types of the sandbox-mcp HTTP API. The server
// (internal/api and its leaves), the typed client (sidecar), the CLI, the MCP
// server and the host side share them, so a field is named once; and the one
// validation of a start request (StartServiceRequest.Validate), so every entry
// refuses the same requests with the same words.
package apitype

// ErrorResponse is every error body: {"error": "..."}.
type ErrorResponse struct {
	Error string `json:"error"`
}

// StatusResponse is the body of GET /api/health and GET /api/auth/check.
type StatusResponse struct {
	Status string `json:"status"`
	// Version is the sidecar's build (GET /api/health only; older sidecars omit it).
	Version string `json:"version,omitempty"`
}

// SuccessResponse is {"success": true}.
type SuccessResponse struct {
	Success bool `json:"success"`
}
