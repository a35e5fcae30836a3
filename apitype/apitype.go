// Package apitype holds the JSON wire types of the sandbox-mcp HTTP API. The server
// (internal/api), the typed client and the CLI share them, so a field is named once.
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
