package apitype

// ExposeResponse is the body of POST /api/expose (200, and 502 with Error set).
type ExposeResponse struct {
	Success     bool   `json:"success,omitempty"`
	Error       string `json:"error,omitempty"`
	ExposedPort int    `json:"exposedPort"`
}
