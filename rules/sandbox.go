package rules

// The sandbox's users and the defaults of its limits, shared by every engine and the
// image definition.
const (
	// UserName is the unprivileged account of every sandbox; its home is HomeDir.
	UserName = "user"
	// UserID is its uid and gid.
	UserID = 1000
)

// Host ids of a user-namespaced sandbox: ids 0 … IDCount-1 inside are
// HostIDBase … HostIDBase+IDCount-1 on the host. Every sandbox uses the same range,
// so a file one sandbox writes (a volume, an image layer) has the same owner in any
// other.
const (
	HostIDBase = 100000
	IDCount    = 65536
)

// Default limits of a sandbox when its spec gives none.
const (
	// DefaultMemoryBytes is 2 GiB.
	DefaultMemoryBytes = 2 << 30
	// DefaultPids is the number of processes and threads.
	DefaultPids = 1024
	// DefaultDiskBytes is what a sandbox may write to its own filesystem: 10 GiB.
	DefaultDiskBytes = 10 << 30
	// DefaultShmBytes is the size of /dev/shm: 64 MiB, as Docker's.
	DefaultShmBytes = 64 << 20
)
