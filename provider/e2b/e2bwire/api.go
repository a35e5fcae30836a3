package e2bwire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// NewSandbox is POST /sandboxes's body.
type NewSandbox struct {
	TemplateID string `json:"templateID"`
	// Timeout is the sandbox lifetime in seconds.
	Timeout             int               `json:"timeout,omitempty"`
	AutoPause           bool              `json:"autoPause,omitempty"`
	Secure              bool              `json:"secure,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	VolumeMounts        []VolumeMount     `json:"volumeMounts,omitempty"`
	Network             *NetworkConfig    `json:"network,omitempty"`
}

// DenyAll is the denyOut entry that denies every IPv4 destination: with it, allowOut
// lists the only destinations a sandbox reaches.
const DenyAll = "0.0.0.0/0"

// NetworkConfig is SandboxNetworkConfig: egress rules and the port hosts' access.
// AllowOut entries (a CIDR block, an IP address, a domain or *.domain) take precedence
// over DenyOut ones (CIDR blocks or IP addresses).
type NetworkConfig struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// AllowPublicTraffic false makes the port hosts want the sandbox's traffic token.
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    *string         `json:"maskRequestHost,omitempty"`
	HTTPSPorts         []int           `json:"httpsPorts,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
}

// VolumeMount is SandboxVolumeMount: the volume Name mounted at Path (absolute).
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// NewVolume is POST /volumes's body.
type NewVolume struct {
	Name string `json:"name"`
}

// Volume is an entry of GET /volumes.
type Volume struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

// VolumeAndToken is the answer of POST /volumes and GET /volumes/{volumeID}; Token
// authorizes E2B's volume content API.
type VolumeAndToken struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
}

// Sandbox is the answer of create and connect.
type Sandbox struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	Alias           string `json:"alias,omitempty"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	Domain          string `json:"domain,omitempty"`
	// TrafficAccessToken is what requests to the sandbox's port hosts must carry in
	// the e2b-traffic-access-token header; set when the sandbox was created with
	// network.allowPublicTraffic false.
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
}

// Sandbox states.
const (
	StateRunning = "running"
	StatePaused  = "paused"
)

// SandboxDetail is GET /sandboxes/{id}; ListedSandbox has the same fields minus the
// access token.
type SandboxDetail struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          string            `json:"domain,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	State           string            `json:"state"`
	VolumeMounts    []VolumeMount     `json:"volumeMounts,omitempty"`
}

// SnapshotInfo is a snapshot made from a sandbox.
type SnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// APIError is a control-plane error: the status and E2B's {code, message} body.
type APIError struct {
	Status  int    `json:"-"`
	Code    int    `json:"code"`
	Message string `json:"message"`
	// Body is the raw body when it was not E2B's error shape.
	Body string `json:"-"`
}

// HTTPStatus is the answer's HTTP status (provider.ProviderError.StatusCode).
func (e *APIError) HTTPStatus() int { return e.Status }

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Body
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("e2b api: HTTP %d: %s", e.Status, msg)
}

// ForkResult is one entry of POST /sandboxes/{id}/fork's answer: the new sandbox or
// why it did not start.
type ForkResult struct {
	Sandbox *Sandbox  `json:"sandbox,omitempty"`
	Error   *APIError `json:"error,omitempty"`
}
