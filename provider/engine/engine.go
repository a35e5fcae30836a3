// Package engine is the contract between the host side and a machine that runs
// sandboxes. Three engines implement it: provider/local on this machine, provider/modal
// over Modal's API and provider/e2b over E2B's. The one provider (provider.New) boots
// the platform's sandboxes on any of them; the local Modal- and E2B-compatible servers
// (provider/modal/modalserver, provider/e2b/e2bserver) serve their protocols on top of
// any Engine, and sandboxctl drives one.
//
// Where an engine's state lives is the engine's business: the local engine keeps it in
// a data dir and survives a restart of the process that controls it, the Modal and E2B
// engines keep none (the service has it). Either way List never lies about what is
// alive. What engines do differently is said by Capabilities and by the small optional
// interfaces at the end of this file (PortURLer, Starter, HostBinder, PortClienter),
// never by the caller knowing which engine it has.
package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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
	// ErrIsDir: a file operation named a directory where it needs a file.
	ErrIsDir = errors.New("is a directory")
	// ErrNotDir: a path component, or the target of a directory operation, is not a
	// directory.
	ErrNotDir = errors.New("not a directory")
	// ErrNotEmpty: a directory to remove without recursion is not empty.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrInUse: a volume or image to remove is used by a live sandbox; the error's text
	// names the sandboxes.
	ErrInUse = errors.New("in use")
	// ErrLimit: a requested limit cannot be applied honestly on this machine (the
	// error's text says which and why); the create is refused rather than run without it.
	ErrLimit = errors.New("limit cannot be applied")
)

// Mount binds a host path into the sandbox.
type Mount struct {
	Source   string `json:"source"` // host path
	Target   string `json:"target"` // path inside the sandbox
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Limits are resource limits. In a Spec, zero means the engine's default (documented by
// each engine); in Info.Applied, the values that hold, zero meaning none.
type Limits struct {
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	Pids        int64 `json:"pids,omitempty"`
	// CPUMillis is the CPU bandwidth in thousandths of a CPU (1500 = 1.5 CPUs).
	CPUMillis int64 `json:"cpuMillis,omitempty"`
	// DiskBytes caps what the sandbox can write to its own filesystem (its writable
	// layer); volumes have their own capacity.
	DiskBytes int64 `json:"diskBytes,omitempty"`
}

// VolumeMount mounts a named volume (see Volumes) into the sandbox.
type VolumeMount struct {
	Name     string `json:"name"`
	Target   string `json:"target"` // absolute path inside the sandbox
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Spec describes a sandbox to create.
type Spec struct {
	// Name is an optional unique name among live sandboxes (Modal's sandbox name).
	Name string `json:"name,omitempty"`
	// Snapshot, when set, is the snapshot id whose writable state the sandbox starts from.
	Snapshot string `json:"snapshot,omitempty"`
	// Image is the image (id or name) the sandbox's root filesystem comes from; empty
	// means the engine's default image.
	Image string `json:"image,omitempty"`
	// Runtime names the isolation runtime (engine-specific, see Capabilities.Runtimes);
	// empty means the engine's default.
	Runtime string `json:"runtime,omitempty"`
	// Volumes are named volumes mounted into the sandbox (Capabilities.Volumes).
	Volumes []VolumeMount `json:"volumes,omitempty"`
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
	// EgressHosts, with Egress, are the only host names (exact, or "*.example.com") the
	// proxy lets the sandbox reach; empty means any public address. "*" is any name; an
	// IP address or CIDR prefix lets the sandbox reach it even when private or the
	// host's own (never the host's loopback). Entries follow egresshost.Parse.
	EgressHosts []string `json:"egressHosts,omitempty"`
	// Timeout ends the sandbox after this long; zero means no limit.
	Timeout time.Duration `json:"timeout,omitempty"`
	Limits  Limits        `json:"limits,omitempty"`
	Mounts  []Mount       `json:"mounts,omitempty"`
	// Labels are free-form metadata kept with the sandbox (tags, metadata).
	Labels map[string]string `json:"labels,omitempty"`
	// Secrets are credentials the sandbox never holds: inside, each one's variable holds
	// a placeholder, and the engine's egress proxy puts the value in place of the
	// placeholder on requests to that secret's hosts only (package egress). An engine
	// that cannot route the sandbox's traffic through such a proxy refuses Secrets.
	Secrets []Secret `json:"secrets,omitempty"`
}

// Secret is one credential of Spec.Secrets.
type Secret struct {
	// Name is the environment variable that holds the placeholder inside.
	Name string `json:"name"`
	// Value is the credential. It stays on the host side: never serialized, never
	// in the sandbox's environment, files, argv or logs.
	Value string `json:"-"`
	// Hosts are the host names (egresshost's grammar, no scheme or port) the value may
	// be sent to; they are allowed egress for the sandbox.
	Hosts []string `json:"hosts"`
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
	// Runtime is the isolation runtime the sandbox runs under.
	Runtime string `json:"runtime,omitempty"`
	// Image is the id of the image the sandbox booted from, if any.
	Image string `json:"image,omitempty"`
	// Volumes are the volumes mounted into the sandbox.
	Volumes []VolumeMount `json:"volumes,omitempty"`
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

// Capabilities say what an engine does honestly. What one leaves out, the engine
// refuses with ErrUnsupported rather than ignores: Pause and Resume without Pause,
// Snapshot without Snapshot, DialPort without DialPort, a Spec with Volumes without
// Volumes, a Spec.Image without Images, a Spec.Name without Names, an ExecRequest.TTY
// without TTY.
type Capabilities struct {
	Isolated bool `json:"isolated"`
	Pause    bool `json:"pause"`
	Snapshot bool `json:"snapshot"`
	Limits   bool `json:"limits"`
	// DialPort: DialPort connects to ports inside sandboxes.
	DialPort bool `json:"dialPort"`
	// Volumes: the engine implements Volumes and honours Spec.Volumes.
	Volumes bool `json:"volumes"`
	// Images: Spec.Image boots from an image, and snapshots are images.
	Images bool `json:"images"`
	// Names: Spec.Name is honoured (unique among live sandboxes, ErrNameTaken); without
	// it, a Create with a name is refused with ErrUnsupported.
	Names bool `json:"names"`
	// TTY: ExecRequest.TTY runs the command on a terminal; without it, such an Exec is
	// refused with ErrUnsupported.
	TTY bool `json:"tty"`
	// FileErrors: file calls tell ErrIsDir and ErrNotDir apart (see Engine); without
	// it, such calls still fail, with an error that may say only why in its text.
	FileErrors bool `json:"fileErrors"`
	// ExecKill: cancelling an Exec's context kills its command; without it, Exec
	// returns all the same, but the command may run on in the sandbox.
	ExecKill bool `json:"execKill"`
	// Runtimes are the values Spec.Runtime accepts, the default first.
	Runtimes []string `json:"runtimes,omitempty"`
	// SSH: the engine tunnels sshd's port (rules.PortSSH) as raw TCP when Spec.Ports
	// names it (Modal's unencrypted port), so the one provider asks for it at every
	// boot and reports its tunnel (Info.Tunnels) as the create's SSH host and port.
	SSH bool `json:"ssh,omitempty"`
}

// RootFS is an image unpacked for booting: read-only layer directories on the host,
// lowest first, and the image's configuration. An engine that boots images gets it from
// an ImageResolver. The layers' files are owned by the sandboxes' host ids (id n inside
// is rules.HostIDBase+n on the host), never by the host's root: an engine whose user
// namespace maps 0 to rules.HostIDBase mounts them as they are, not id-mapped.
type RootFS struct {
	ID     string   `json:"id"`
	Layers []string `json:"layers"`
	Env    []string `json:"env,omitempty"`
	// WorkDir and User are the image's defaults for commands (empty: / and root).
	WorkDir string `json:"workDir,omitempty"`
	User    string `json:"user,omitempty"`
}

// ImageResolver finds an image by id or name and makes its layers available on the host.
type ImageResolver interface {
	ResolveImage(ctx context.Context, ref string) (RootFS, error)
}

// ImageCommitter is an ImageResolver that also takes a sandbox's writable layer as a
// new image: an engine given one makes the snapshots of image sandboxes images (Modal's
// snapshotFilesystem), which Spec.Image (or Spec.Snapshot) boots.
type ImageCommitter interface {
	ImageResolver
	// CommitImage stores dir, an overlayfs upper layer whose host ids idBase …
	// idBase+idCount-1 are the sandbox's 0 … idCount-1, as a layer on top of parent, with
	// parent's configuration, and returns the new image's id.
	CommitImage(ctx context.Context, parent, dir string, idBase, idCount int) (string, error)
}

// VolumeSpec describes a named volume to create.
type VolumeSpec struct {
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacityBytes,omitempty"` // zero: the engine's default
	Labels        map[string]string `json:"labels,omitempty"`
}

// VolumeInfo describes a volume.
type VolumeInfo struct {
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacityBytes"`
	Created       time.Time         `json:"created"`
	LastAccessed  time.Time         `json:"lastAccessed"` // bumped by every mount
	Labels        map[string]string `json:"labels,omitempty"`
	// UsedBy are the ids of the live sandboxes that mount it.
	UsedBy []string `json:"usedBy,omitempty"`
}

// Volumes is implemented by engines with Capabilities.Volumes: named volumes that outlive
// every sandbox, mountable read-write or read-only in several sandboxes at once.
type Volumes interface {
	// CreateVolume creates a volume; an existing name is returned as it is when
	// ifMissing is set, and is an error otherwise.
	CreateVolume(ctx context.Context, spec VolumeSpec, ifMissing bool) (VolumeInfo, error)
	GetVolume(ctx context.Context, name string) (VolumeInfo, error)
	ListVolumes(ctx context.Context) ([]VolumeInfo, error)
	// RemoveVolume deletes a volume and its data; one in use is refused with ErrInUse.
	RemoveVolume(ctx context.Context, name string) error
}

// Engine runs sandboxes. Every method is safe for concurrent use. Paths inside a sandbox
// are absolute and resolved inside it (never escaping to the host).
//
// Errors: a call on a sandbox id the engine does not know, or on one terminated or
// dead, is ErrNotFound (Terminate excepted: a gone sandbox is success). A file call on a
// live sandbox whose path does not exist is fs.ErrNotExist, never ErrNotFound; one that
// names a directory where it needs a file is ErrIsDir, and one whose path (or a
// component of it) is a file where it needs a directory is ErrNotDir (with
// Capabilities.FileErrors; otherwise they fail all the same). The contract
// suite, provider/engine/enginetest, checks all of this on every engine.
type Engine interface {
	Capabilities() Capabilities
	Create(ctx context.Context, spec Spec) (Info, error)
	// Get describes a sandbox. After Terminate it is ErrNotFound, or (an engine over a
	// service that remembers finished sandboxes) an Info with StateDead.
	Get(ctx context.Context, id string) (Info, error)
	// List returns every live sandbox (running or paused, with that State) and never a
	// terminated one. A sandbox that ended on its own (its Timeout, its init's exit)
	// is either left out or listed with StateDead until Terminate; it is never listed
	// as running. The entries carry at least ID and State; Get has the rest.
	List(ctx context.Context) ([]Info, error)
	// Exec runs a command and returns its exit code; ctx cancellation ends the call
	// and (Capabilities.ExecKill) kills the command. The environment is Spec.Env then
	// ExecRequest.Env, a later KEY winning. Past its Timeout the command is killed and
	// Exec returns 124 and ErrTimeout.
	Exec(ctx context.Context, id string, req ExecRequest) (exitCode int, err error)
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
	// WriteFile creates parent directories as needed and replaces an existing file.
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	// ListFiles lists a directory's entries, in no particular order.
	ListFiles(ctx context.Context, id, dir string) ([]FileInfo, error)
	Stat(ctx context.Context, id, path string) (FileInfo, error)
	// MkdirAll creates a directory and its parents; an existing directory is success.
	MkdirAll(ctx context.Context, id, path string) error
	// Remove deletes a file, or a directory with everything under it.
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

// PortURLer is implemented by engines whose sandbox ports have a URL the host reaches
// that Info.Tunnels does not spell (Modal's TLS tunnels, E2B's port hosts). Without
// it, a port's URL is http:// to its tunnel in Info.Tunnels.
type PortURLer interface {
	// PortURL is an http:// or https:// URL that reaches port inside the sandbox.
	PortURL(ctx context.Context, id string, port int) (string, error)
}

// PortClienter is implemented by engines whose port URLs need an HTTP client of
// their own (a tunnel certificate the system does not trust). Without it, a default
// client is used.
type PortClienter interface {
	// PortClient is the HTTP client for the URLs of PortURL.
	PortClient() *http.Client
}

// Starter is implemented by engines that start a command nobody waits for: it lives
// as long as the sandbox, and the call returns once it runs. A boot starts its
// long-lived programs (sandbox-mcp, OpenCode) this way.
type Starter interface {
	// StartDetached starts req (its Stdin, Stdout, Stderr and TTY are unused) and
	// returns the process id inside the sandbox, or 0 when the engine cannot tell.
	StartDetached(ctx context.Context, id string, req ExecRequest) (int, error)
}

// HostBinder is implemented by engines that can bind host paths into a sandbox
// (Spec.Mounts); a boot binds local repositories in read-only this way. Engines
// without it refuse Spec.Mounts.
type HostBinder interface {
	// BindsHostPaths reports whether Spec.Mounts is honoured.
	BindsHostPaths() bool
}
