// Package ports lists the TCP ports listening in the sandbox: the listening
// sockets (from netlink sock_diag, or /proc/net/tcp and /proc/net/tcp6 where
// that is missing), the process owning each (socket inode →
// /proc/<pid>/fd), its command line, and the service it belongs to, read from
// the SANDBOX_MCP_SERVICE variable the service manager puts in every service's
// environment. internal/api serves it as GET /api/ports; it knows nothing of HTTP.
package ports

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/procfs"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ServiceEnv is the environment variable naming the service a process belongs to.
const ServiceEnv = rules.EnvService

// InstanceEnv is the environment variable unique to one run (start) of a
// service, which every process of the run inherits.
const InstanceEnv = rules.EnvServiceInstance

// DefaultMaxAge is how long a scan is reused.
const DefaultMaxAge = time.Second

// maxCommand bounds the command line reported for one process.
const maxCommand = 4096

// Well-known ports of the sandbox's infrastructure.
var knownPorts = map[int]string{
	22:                 apitype.PortKindSSHD,
	rules.PortVSCode:   apitype.PortKindVSCode,
	rules.PortOpenCode: apitype.PortKindOpenCode,
}

// Listener is one listening TCP socket.
type Listener struct {
	Port    int
	Address string // "0.0.0.0", "::", "127.0.0.1", ...
	Family  string // apitype.FamilyIPv4 or apitype.FamilyIPv6
	Inode   uint64
	// PID is the owning process, 0 when it cannot be seen (another user's process).
	PID int
	// PGID is the owning process's group; a service's pid is its group id.
	PGID int
	// Name is the process name (comm), Command its command line.
	Name    string
	Command string
	// Service is the value of SANDBOX_MCP_SERVICE in the process's environment.
	Service string
	// Instance is the value of SANDBOX_MCP_SERVICE_INSTANCE there: which run
	// of the service holds the socket.
	Instance string
	// Kind names known infrastructure (apitype.PortKind*), empty otherwise.
	Kind string
}

// Options configures a Scanner.
type Options struct {
	Logger *slog.Logger
	// Proc is the proc file system; default "/proc".
	Proc string
	// MaxAge is how long a scan is reused; default DefaultMaxAge, negative
	// disables the cache.
	MaxAge time.Duration
	// Now is the clock of the cache; default time.Now.
	Now func() time.Time
	// SelfPID is the sidecar's pid; default os.Getpid().
	SelfPID int
	// SidecarPorts are the sidecar's own listen ports, marked even when the
	// owning process cannot be seen.
	SidecarPorts []int
}

// Scanner lists listening sockets, reusing a scan for up to MaxAge.
type Scanner struct {
	opts Options
	log  *slog.Logger

	mu   sync.Mutex
	at   time.Time
	last []Listener
	// noDiag is set once netlink sock_diag proved unavailable.
	noDiag atomic.Bool
}

// New checks opts and returns a Scanner.
func New(opts Options) (*Scanner, error) {
	if opts.Logger == nil {
		return nil, errors.New("ports: Logger is required")
	}
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	if _, err := os.Stat(filepath.Join(opts.Proc, "net", "tcp")); err != nil {
		return nil, fmt.Errorf("ports: %w", err)
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SelfPID == 0 {
		opts.SelfPID = os.Getpid()
	}
	return &Scanner{opts: opts, log: opts.Logger.With("component", "ports")}, nil
}

// List returns the listening sockets ordered by port, family and address.
// The result is the caller's to keep.
func (s *Scanner) List(ctx context.Context) ([]Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	if s.opts.MaxAge > 0 && !s.at.IsZero() && now.Sub(s.at) < s.opts.MaxAge && !now.Before(s.at) {
		return slices.Clone(s.last), nil
	}
	ls, err := s.scan(ctx)
	if err != nil {
		return nil, err
	}
	s.at, s.last = now, ls
	return slices.Clone(ls), nil
}

// Port returns the sockets listening on port with their owners, from a fresh
// scan (the cache is neither used nor updated): a readiness probe must see
// who holds the port now. The processes in prefer are searched first for the
// owners, so checking a port a known process holds stays cheap; other
// processes are searched only when they are not the owners.
func (s *Scanner) Port(ctx context.Context, port int, prefer ...int) ([]Listener, error) {
	return s.scanPorts(ctx, func(so Socket) bool { return so.Port == port }, prefer)
}

func (s *Scanner) scan(ctx context.Context) ([]Listener, error) {
	return s.scanPorts(ctx, nil, nil)
}

// listening returns the listening TCP sockets: through netlink sock_diag
// when the scanner reads the real /proc and the kernel offers it, otherwise
// from <Proc>/net/tcp and tcp6.
func (s *Scanner) listening() ([]Socket, error) {
	if s.opts.Proc == "/proc" && !s.noDiag.Load() {
		v4, err := diagListeners(syscall.AF_INET)
		if err == nil {
			v6, err6 := diagListeners(syscall.AF_INET6)
			if err6 == nil || errors.Is(err6, errDiagUnsupported) {
				return append(v4, v6...), nil // no IPv6: none of its sockets
			}
			err = err6
		}
		if errors.Is(err, errDiagUnsupported) {
			s.noDiag.Store(true)
			s.log.Info("netlink sock_diag unavailable; reading /proc/net/tcp", "err", err)
		} else {
			s.log.Warn("list sockets through netlink; reading /proc/net/tcp", "err", err)
		}
	}
	var socks []Socket
	for _, f := range []struct{ name, family string }{{"tcp", apitype.FamilyIPv4}, {"tcp6", apitype.FamilyIPv6}} {
		b, err := os.ReadFile(filepath.Join(s.opts.Proc, "net", f.name))
		if err != nil {
			if f.name == "tcp6" && errors.Is(err, fs.ErrNotExist) {
				continue // kernel without IPv6
			}
			return nil, fmt.Errorf("read %s: %w", f.name, err)
		}
		ss, err := ParseNetTCP(b, f.family)
		if err != nil {
			return nil, err
		}
		for _, so := range ss {
			if so.State == StateListen {
				socks = append(socks, so)
			}
		}
	}
	return socks, nil
}

// scanPorts lists the listening sockets that keep accepts (all when nil).
func (s *Scanner) scanPorts(ctx context.Context, keep func(Socket) bool, prefer []int) ([]Listener, error) {
	socks, err := s.listening()
	if err != nil {
		return nil, err
	}
	if keep != nil {
		socks = slices.DeleteFunc(socks, func(so Socket) bool { return !keep(so) })
	}
	owners, err := s.owners(ctx, socks, prefer)
	if err != nil {
		return nil, err
	}
	procs := map[int]procInfo{}
	ls := make([]Listener, 0, len(socks))
	for _, so := range socks {
		l := Listener{Port: so.Port, Address: so.Addr.String(), Family: so.Family, Inode: so.Inode, PID: owners[so.Inode]}
		if l.PID != 0 {
			p, ok := procs[l.PID]
			if !ok {
				p = readProc(filepath.Join(s.opts.Proc, strconv.Itoa(l.PID)))
				procs[l.PID] = p
			}
			l.PGID, l.Name, l.Command, l.Service, l.Instance = p.pgid, p.name, p.command, p.service, p.instance
		}
		l.Kind = s.kind(l)
		ls = append(ls, l)
	}
	slices.SortFunc(ls, func(a, b Listener) int {
		if a.Port != b.Port {
			return a.Port - b.Port
		}
		if a.Family != b.Family {
			return strings.Compare(a.Family, b.Family)
		}
		return strings.Compare(a.Address, b.Address)
	})
	return ls, nil
}

// kind recognizes the sidecar by its pid, Caddy and sshd by process name, and
// the editor and agent servers by their well-known ports unless a service of
// the user's holds them.
func (s *Scanner) kind(l Listener) string {
	switch {
	case l.PID == s.opts.SelfPID && l.PID != 0:
		return apitype.PortKindSidecar
	case l.PID == 0 && slices.Contains(s.opts.SidecarPorts, l.Port):
		return apitype.PortKindSidecar
	case l.Name == "caddy":
		return apitype.PortKindCaddy
	case l.Name == "sshd":
		return apitype.PortKindSSHD
	case l.Service == "":
		return knownPorts[l.Port]
	}
	return ""
}

// owners maps each socket inode to the pid of a process holding it, walking
// /proc/<pid>/fd (the pids of prefer first) until every inode is found.
// Processes that cannot be read (other users', or gone meanwhile) are skipped.
func (s *Scanner) owners(ctx context.Context, socks []Socket, prefer []int) (map[uint64]int, error) {
	want := make(map[uint64]bool, len(socks))
	for _, so := range socks {
		if so.Inode != 0 {
			want[so.Inode] = true
		}
	}
	owners := make(map[uint64]int, len(want))
	if len(want) == 0 {
		return owners, nil
	}
	var link [64]byte
	// search records the sockets of want that pid holds; it reports whether
	// every one has an owner now.
	search := func(pid int) bool {
		fdDir := filepath.Join(s.opts.Proc, strconv.Itoa(pid), "fd")
		fd, err := os.Open(fdDir)
		if err != nil {
			return false
		}
		fds, _ := fd.Readdirnames(-1)
		fd.Close()
		for _, n := range fds {
			ino, ok := socketInode(fdDir+"/"+n, link[:])
			if !ok || !want[ino] {
				continue
			}
			if _, seen := owners[ino]; !seen {
				owners[ino] = pid
			}
		}
		return len(owners) == len(want)
	}
	for _, pid := range prefer {
		if pid > 0 && search(pid) {
			return owners, nil
		}
	}
	d, err := os.Open(s.opts.Proc)
	if err != nil {
		return nil, fmt.Errorf("open proc: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	// Ascending pids: a socket shared after fork usually goes to the parent.
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 && !slices.Contains(prefer, pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	for _, pid := range pids {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("scan processes: %w", ctx.Err())
		}
		if search(pid) {
			break
		}
	}
	return owners, nil
}

// socketInode reads the fd symlink at path and returns the inode of
// "socket:[N]", reading into buf: a scan reads every fd of every process.
func socketInode(path string, buf []byte) (uint64, bool) {
	n, err := syscall.Readlink(path, buf)
	if err != nil || n <= 0 {
		return 0, false
	}
	target := buf[:n]
	const prefix = "socket:["
	if len(target) < len(prefix)+2 || string(target[:len(prefix)]) != prefix || target[len(target)-1] != ']' {
		return 0, false
	}
	var ino uint64
	for _, c := range target[len(prefix) : len(target)-1] {
		if c < '0' || c > '9' {
			return 0, false
		}
		ino = ino*10 + uint64(c-'0')
	}
	return ino, true
}

type procInfo struct {
	pgid     int
	name     string
	command  string
	service  string
	instance string
}

// readProc reads what we show of one process; fields it cannot read stay empty.
func readProc(dir string) procInfo {
	var p procInfo
	if b, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
		if st, err := procfs.ParseStat(b); err == nil {
			p.name, p.pgid = st.Comm, st.PGID
		}
	}
	if b, err := readHead(filepath.Join(dir, "cmdline"), maxCommand+1); err == nil {
		b = bytes.TrimRight(b, "\x00")
		cut := len(b) > maxCommand
		if cut {
			b = b[:maxCommand]
		}
		p.command = strings.ToValidUTF8(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), "\uFFFD")
		if cut {
			p.command += "…"
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		p.service = envValue(b, ServiceEnv)
		p.instance = envValue(b, InstanceEnv)
	}
	return p
}

func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(n)))
}

// ServiceFromEnviron returns the value of ServiceEnv in a NUL-separated
// environment block such as /proc/<pid>/environ, or "".
func ServiceFromEnviron(environ []byte) string { return envValue(environ, ServiceEnv) }

// envValue returns the value of key in a NUL-separated environment block, or "".
func envValue(environ []byte, key string) string {
	prefix := []byte(key + "=")
	for kv := range bytes.SplitSeq(environ, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(v)
		}
	}
	return ""
}
