// Package engine is the contract between the host-side providers and a machine that runs
// sandboxes. provider/local implements it with Linux namespaces on one machine; the local
// Modal- and E2B-compatible servers (provider/modal/modalserver, provider/e2b/e2bserver)
// serve their protocols on top of any Engine, and sandboxctl drives it.
//
// An Engine keeps its state (sandboxes, snapshots, tunnels) in one data dir and survives a
// restart of the process that controls it: List never lies about what is alive.
package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// Errors every Engine returns (wrapped) so callers can map them to their protocol.
var (
	// ErrNotFound: no sandbox or snapshot with that id (or it is gone).
	ErrNotFound = errors.New("not found")
	// ErrNameTaken: Spec.Name is used by a live sandbox.
	ErrNameTaken = errors.New("name is taken by a live sandbox")
	// ErrNotIsolated: namespaces are not permitted here and the caller did not opt into
	// unisolated mode.
	ErrNotIsolated = errors.New("namespaces are not permitted here")
	// ErrTimeout: an exec ran past its timeout and was killed.
	ErrTimeout = errors.New("timed out")
	// ErrUnsupported: the engine cannot do this honestly (see Capabilities).
	ErrUnsupported = errors.New("not supported by this engine")
)

// Mount binds a host path into the sandbox.
type Mount struct {
	Source   string `json:"source"` // host path
	Target   string `json:"target"` // path inside the sandbox
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Limits are optional resource limits; zero means none.
type Limits struct {
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	Pids        int64 `json:"pids,omitempty"`
}

// Spec describes a sandbox to create.
type Spec struct {
	// Name is an optional unique name among live sandboxes (Modal's sandbox name).
	Name string `json:"name,omitempty"`
	// Snapshot, when set, is the snapshot id whose writable state the sandbox starts from.
	Snapshot string `json:"snapshot,omitempty"`
	// Env is the environment of every exec (KEY=VALUE).
	Env []string `json:"env,omitempty"`
	// Ports are the ports inside the sandbox that get a tunnel on the host.
	Ports []int `json:"ports,omitempty"`
	// Network lets the sandbox reach the outside; false means loopback only.
	// (local engine: the sandbox shares the host's network, ports included.)
	Network bool `json:"network,omitempty"`
	// Egress, without Network, keeps the sandbox's own network (its ports stay its
	// own) and lets it reach the outside through an HTTP proxy (HTTP_PROXY and
	// HTTPS_PROXY are set for every exec). The host's loopback stays out of reach.
	Egress bool `json:"egress,omitempty"`
	// Timeout ends the sandbox after this long; zero means no limit.
	Timeout time.Duration `json:"timeout,omitempty"`
	Limits  Limits        `json:"limits,omitempty"`
	Mounts  []Mount       `json:"mounts,omitempty"`
	// Labels are free-form metadata kept with the sandbox (tags, metadata).
	Labels map[string]string `json:"labels,omitempty"`
}

// State of a sandbox.
type State string

// States.
const (
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateDead    State = "dead"
)

// Tunnel is a host listener forwarding to a port inside the sandbox.
type Tunnel struct {
	Port     int    `json:"port"` // inside the sandbox
	Host     string `json:"host"` // host address, e.g. 127.0.0.1
	HostPort int    `json:"hostPort"`
}

// Info describes a sandbox.
type Info struct {
	ID       string            `json:"id"`
	Name     string            `json:"name,omitempty"`
	State    State             `json:"state"`
	Created  time.Time         `json:"created"`
	Tunnels  []Tunnel          `json:"tunnels,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Isolated bool              `json:"isolated"`
	// Home is the host path of the sandbox's /home/user (for diagnostics and tests).
	Home string `json:"home,omitempty"`
	// Applied are the limits that actually took effect.
	Applied Limits `json:"applied,omitempty"`
	// ExitCode is set once the sandbox is dead (124 after its Timeout).
	ExitCode *int `json:"exitCode,omitempty"`
}

// ExecRequest is one command run inside a sandbox.
type ExecRequest struct {
	Argv    []string
	Cwd     string
	Env     []string // added to Spec.Env
	Timeout time.Duration
	Stdin   io.Reader // nil: empty stdin
	Stdout  io.Writer // streamed; nil discards
	Stderr  io.Writer
	// TTY runs the command on a pseudo-terminal of Size: Stdin is its keyboard,
	// Stdout gets everything it prints (Stderr is unused), Resize changes its size.
	TTY    bool
	Size   WindowSize
	Resize <-chan WindowSize
}

// WindowSize is a terminal's size; zero means 80x24.
type WindowSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// FileInfo is one entry of ListFiles or Stat.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // os.FileMode bits
	IsDir   bool      `json:"isDir"`
	ModTime time.Time `json:"modTime"`
}

// Capabilities say what an engine does honestly.
type Capabilities struct {
	Isolated bool `json:"isolated"`
	Pause    bool `json:"pause"`
	Snapshot bool `json:"snapshot"`
	Limits   bool `json:"limits"`
}

// Engine runs sandboxes. Every method is safe for concurrent use. Paths inside a sandbox
// are absolute and resolved inside it (never escaping to the host).
type Engine interface {
	Capabilities() Capabilities
	Create(ctx context.Context, spec Spec) (Info, error)
	Get(ctx context.Context, id string) (Info, error)
	// List returns every known sandbox, dead ones included until removed by Terminate.
	List(ctx context.Context) ([]Info, error)
	// Exec runs a command and returns its exit code; ctx cancellation kills it.
	Exec(ctx context.Context, id string, req ExecRequest) (exitCode int, err error)
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
	// WriteFile creates parent directories as needed.
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	ListFiles(ctx context.Context, id, dir string) ([]FileInfo, error)
	Stat(ctx context.Context, id, path string) (FileInfo, error)
	MkdirAll(ctx context.Context, id, path string) error
	Remove(ctx context.Context, id, path string) error
	// Snapshot stores the sandbox's writable state and returns a snapshot id.
	Snapshot(ctx context.Context, id string) (string, error)
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Terminate kills everything in the sandbox, removes its mounts and tunnels; a gone
	// sandbox is success.
	Terminate(ctx context.Context, id string) error
	// DialPort connects to a port inside the sandbox's network namespace.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	// Close releases the controlling process's resources; sandboxes keep running.
	Close() error
}
