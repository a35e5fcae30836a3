// Command probe is what an attacker runs as root inside a sandbox of the local
// engine (hostile_test.go builds it static and copies it in through the engine's
// file API, so it runs on any root, with or without a shell or python).
//
// Each check prints one line: "ok NAME DETAIL" when the sandbox refused the
// attempt, "BROKEN NAME DETAIL" when it got through. The modes:
//
//	probe syscalls              system calls Docker's default profile refuses
//	probe fds [MARKER...]       every readable descriptor of every process inside
//	probe hog MB                allocate and touch MB megabytes
//	probe dns ADDR LOG SECONDS  a UDP name server on ADDR:53 that appends every query to LOG
//	probe proxy HOST...         a request for each HOST through $HTTP_PROXY: prints its status
package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe syscalls|fds|hog|dns|proxy ...")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "syscalls":
		syscalls()
	case "fds":
		fds(args)
	case "hog":
		mb, err := strconv.Atoi(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		hog(mb)
	case "dns":
		secs, _ := strconv.Atoi(args[2])
		if err := dns(args[0], args[1], time.Duration(secs)*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "proxy":
		proxy(args)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func report(name string, broken bool, format string, a ...any) {
	word := "ok"
	if broken {
		word = "BROKEN"
	}
	fmt.Printf("%s %s %s\n", word, name, fmt.Sprintf(format, a...))
}

// refused reports a call that a seccomp filter must refuse: EPERM (Docker's
// default action) or ENOSYS (a filter's answer for calls it does not know). Any
// other answer, success or an error of the call itself, means it reached the kernel.
func refused(name string, r1 uintptr, errno syscall.Errno) {
	switch errno {
	case unix.EPERM, unix.ENOSYS:
		report(name, false, "refused: %v", errno)
	case 0:
		report(name, true, "succeeded (returned %d): the filter lets it through", r1)
	default:
		report(name, true, "reached the kernel (%v): the filter lets it through", errno)
	}
}

func syscalls() {
	runtime.LockOSThread()
	// vsock is not namespaced: nothing of the egress policy applies to it.
	fd, _, errno := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if errno == 0 {
		unix.Close(int(fd))
	}
	refused("socket(AF_VSOCK)", fd, errno)
	// Docker allows personality with 0, 8, 0x20000, 0x20008 and 0xffffffff only.
	prev, _, errno := unix.RawSyscall(unix.SYS_PERSONALITY, 0x0400000 /* READ_IMPLIES_EXEC */, 0, 0)
	if errno == 0 {
		unix.RawSyscall(unix.SYS_PERSONALITY, prev, 0, 0)
	}
	refused("personality(READ_IMPLIES_EXEC)", prev, errno)
	pid := uintptr(os.Getpid())
	// kcmp of two descriptors of this process: allowed, it would answer 0.
	r, _, errno := unix.RawSyscall6(unix.SYS_KCMP, pid, pid, 0 /* KCMP_FILE */, 1, 1, 0)
	refused("kcmp", r, errno)

	pidfd, _, perr := unix.RawSyscall(unix.SYS_PIDFD_OPEN, pid, 0, 0)
	if perr != 0 {
		pidfd = ^uintptr(0)
	}
	// With a pidfd of this very process, both calls would succeed if allowed.
	r, _, errno = unix.RawSyscall(unix.SYS_PIDFD_GETFD, pidfd, 1, 0)
	if errno == 0 {
		unix.Close(int(r))
	}
	refused("pidfd_getfd", r, errno)
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		report("mmap", true, "%v", err)
		return
	}
	base := uintptr(unsafe.Pointer(&page[0]))
	iov := unix.Iovec{Base: &page[0]}
	iov.SetLen(os.Getpagesize())
	r, _, errno = unix.RawSyscall6(unix.SYS_PROCESS_MADVISE, pidfd, uintptr(unsafe.Pointer(&iov)), 1, unix.MADV_COLD, 0, 0)
	refused("process_madvise", r, errno)
	if perr == 0 {
		unix.Close(int(pidfd))
	}

	// quotactl_fd(Q_GETFMT) on the root: the kernel would answer (ESRCH without quotas).
	var qfmt [8]byte
	root, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil {
		const qGetFmt = 0x800004
		r, _, errno = unix.RawSyscall6(unix.SYS_QUOTACTL_FD, uintptr(root), qGetFmt<<8, 0, uintptr(unsafe.Pointer(&qfmt[0])), 0, 0)
		refused("quotactl_fd", r, errno)
		unix.Close(root)
	} else {
		report("quotactl_fd", true, "open /: %v", err)
	}
	// The NUMA calls with MPOL_DEFAULT: harmless, and successful when allowed.
	r, _, errno = unix.RawSyscall6(unix.SYS_MBIND, base, uintptr(os.Getpagesize()), 0, 0, 0, 0)
	refused("mbind", r, errno)
	r, _, errno = unix.RawSyscall(unix.SYS_SET_MEMPOLICY, 0, 0, 0)
	refused("set_mempolicy", r, errno)

	// Calls the engine refused before Docker's profile: they must stay refused.
	r, _, errno = unix.RawSyscall(unix.SYS_KEYCTL, 0 /* KEYCTL_GET_KEYRING_ID */, ^uintptr(3) /* KEY_SPEC_USER_KEYRING */, 0)
	refused("keyctl", r, errno)
	r, _, errno = unix.RawSyscall(unix.SYS_USERFAULTFD, 0, 0, 0)
	if errno == 0 {
		unix.Close(int(r))
	}
	refused("userfaultfd", r, errno)
	var params [120]byte
	r, _, errno = unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno == 0 {
		unix.Close(int(r))
	}
	refused("io_uring_setup", r, errno)
	r, _, errno = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
	refused("unshare(CLONE_NEWUSER)", r, errno)
	// syslog(SYSLOG_ACTION_SIZE_BUFFER): the host kernel's log.
	r, _, errno = unix.RawSyscall(unix.SYS_SYSLOG, 10, 0, 0)
	refused("syslog", r, errno)

	mounts()
}

// mounts checks listmount and statmount. Docker's default profile allows both
// (they only see the caller's mount namespace), so what must hold is that they
// show this sandbox's mounts and nothing more.
func mounts() {
	type mntIDReq struct {
		size, spare uint32
		mntID       uint64
		param       uint64
	}
	const lsmtRoot = ^uint64(0)
	req := mntIDReq{size: unix.MNT_ID_REQ_SIZE_VER0, mntID: lsmtRoot}
	ids := make([]uint64, 4096)
	n, _, errno := unix.RawSyscall6(unix.SYS_LISTMOUNT, uintptr(unsafe.Pointer(&req)), uintptr(unsafe.Pointer(&ids[0])), uintptr(len(ids)), 0, 0, 0)
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		report("listmount", true, "read /proc/self/mountinfo: %v", err)
		return
	}
	lines := strings.Count(string(mi), "\n")
	switch {
	case errno == unix.EPERM || errno == unix.ENOSYS:
		report("listmount", false, "refused: %v", errno)
	case errno != 0:
		report("listmount", true, "failed with %v, neither refused nor answered", errno)
	case int(n) > lines:
		report("listmount", true, "lists %d mounts, /proc/self/mountinfo %d: it sees mounts outside the sandbox", n, lines)
	default:
		report("listmount", false, "lists %d mounts, the sandbox's own (mountinfo: %d)", n, lines)
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/", 0, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		report("statmount", false, "statx of / has no unique mount id (%v): nothing to ask", err)
		return
	}
	req = mntIDReq{size: unix.MNT_ID_REQ_SIZE_VER0, mntID: stx.Mnt_id, param: 1 /* STATMOUNT_SB_BASIC */}
	buf := make([]byte, 4096)
	_, _, errno = unix.RawSyscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	switch errno {
	case unix.EPERM, unix.ENOSYS:
		report("statmount", false, "refused: %v", errno)
	case 0:
		report("statmount", false, "answers for the sandbox's own root mount (allowed by Docker's profile)")
	default:
		report("statmount", true, "failed with %v on the sandbox's own root, neither refused nor answered", errno)
	}
}

// fds judges every descriptor of every process it can read: a path must name the
// same file inside the process's root (else it is a file of the host), a socket
// must belong to the holder's network namespace (else it is one of the host's: a
// tunnel listener, the engine's control socket), a namespace must be one of the
// holder's own, and no target may contain a marker the test put on the host.
func fds(markers []string) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := strconv.Itoa(os.Getpid())
	seen, unreadable := 0, 0
	for _, p := range procs {
		pid := filepath.Base(p)
		if pid == self {
			continue
		}
		ents, err := os.ReadDir(p + "/fd")
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				unreadable++
				fmt.Printf("note fds %s (%s): %v\n", pid, comm(pid), err)
			}
			continue
		}
		socks := socketInodes(pid)
		for _, ent := range ents {
			fdPath := p + "/fd/" + ent.Name()
			target, err := os.Readlink(fdPath)
			if err != nil {
				continue // closed meanwhile
			}
			seen++
			name := fmt.Sprintf("fd %s/%s(%s)", pid, ent.Name(), comm(pid))
			if bad := judgeFD(pid, fdPath, target, socks, markers); bad != "" {
				report(name, true, "-> %s: %s", target, bad)
			}
		}
	}
	report("fds", false, "%d descriptors judged, %d processes unreadable", seen, unreadable)
}

func judgeFD(pid, fdPath, target string, socks map[string]bool, markers []string) string {
	for _, m := range markers {
		if m != "" && strings.Contains(target, m) {
			return "names the host's marker " + m
		}
	}
	switch {
	case strings.HasPrefix(target, "/"):
		if strings.HasSuffix(target, " (deleted)") || strings.HasPrefix(target, "/memfd:") {
			return ""
		}
		var viaFD, viaPath unix.Stat_t
		if err := unix.Stat(fdPath, &viaFD); err != nil || harmlessDevice(viaFD) {
			return ""
		}
		if err := unix.Stat("/proc/"+pid+"/root"+target, &viaPath); err != nil {
			return fmt.Sprintf("no such file in the sandbox (%v): a file of the host", err)
		}
		if viaFD.Dev != viaPath.Dev || viaFD.Ino != viaPath.Ino {
			return fmt.Sprintf("is %d:%d, the path inside is %d:%d: a file of the host", viaFD.Dev, viaFD.Ino, viaPath.Dev, viaPath.Ino)
		}
	case strings.HasPrefix(target, "socket:["):
		ino := strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")
		if !socks[ino] {
			return "a socket of another network namespace (the host's?)"
		}
	case strings.Contains(target, ":[") && !strings.HasPrefix(target, "pipe:") && !strings.HasPrefix(target, "anon_inode:"):
		// A namespace: net:[…], mnt:[…], …
		kind, _, _ := strings.Cut(target, ":")
		own, err := os.Readlink("/proc/" + pid + "/ns/" + kind)
		if err == nil && own != target {
			return "a namespace that is not the process's own (" + own + ")"
		}
	}
	return ""
}

// harmlessDevice reports whether st is a character device that any process may
// hold from anywhere: null, zero, full, random, urandom, tty.
func harmlessDevice(st unix.Stat_t) bool {
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return false
	}
	maj, min := unix.Major(st.Rdev), unix.Minor(st.Rdev)
	return (maj == 1 && (min == 3 || min == 5 || min == 7 || min == 8 || min == 9)) || (maj == 5 && min == 0)
}

// socketInodes lists the inodes of the sockets of pid's network namespace.
func socketInodes(pid string) map[string]bool {
	inodes := map[string]bool{}
	for table, col := range map[string]int{"tcp": 9, "tcp6": 9, "udp": 9, "udp6": 9, "raw": 9, "raw6": 9,
		"udplite": 9, "udplite6": 9, "icmp": 9, "icmp6": 9, "unix": 6, "netlink": 8, "packet": 8} {
		f, err := os.Open("/proc/" + pid + "/net/" + table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fl := strings.Fields(sc.Text()); len(fl) > col {
				inodes[fl[col]] = true
			}
		}
		f.Close()
	}
	return inodes
}

func comm(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(b))
}

func hog(mb int) {
	var chunks [][]byte
	for i := 0; i < mb; i++ {
		c := make([]byte, 1<<20)
		for j := 0; j < len(c); j += 4096 {
			c[j] = 1
		}
		chunks = append(chunks, c)
	}
	fmt.Printf("allocated %d MB\n", len(chunks))
}

// dns answers every query with NXDOMAIN and appends its name to log.
func dns(addr, log string, life time.Duration) error {
	pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, "53"))
	if err != nil {
		return fmt.Errorf("listen on %s:53: %w", addr, err)
	}
	defer pc.Close()
	fmt.Println("listening")
	pc.SetDeadline(time.Now().Add(life))
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return nil
		}
		name := queryName(buf[:n])
		if f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintln(f, name)
			f.Close()
		}
		if n >= 12 {
			resp := append([]byte(nil), buf[:n]...)
			resp[2] |= 0x80 // a response
			resp[3] = resp[3]&0xf0 | 3
			pc.WriteTo(resp, from)
		}
	}
}

// queryName reads the first question's name of a DNS message.
func queryName(msg []byte) string {
	var labels []string
	for i := 12; i < len(msg); {
		l := int(msg[i])
		if l == 0 || l&0xc0 != 0 || i+1+l > len(msg) {
			break
		}
		labels = append(labels, string(msg[i+1:i+1+l]))
		i += 1 + l
	}
	return strings.Join(labels, ".")
}

// proxy asks the egress proxy for each host, as a plain request and as CONNECT,
// and prints "status HOST get|connect CODE".
func proxy(hosts []string) {
	p := os.Getenv("HTTP_PROXY")
	if p == "" {
		p = os.Getenv("http_proxy")
	}
	p = strings.TrimSuffix(strings.TrimPrefix(p, "http://"), "/")
	if p == "" {
		fmt.Println("error no HTTP_PROXY inside")
		return
	}
	for _, h := range hosts {
		for _, how := range []string{"get", "connect"} {
			code, err := ask(p, h, how)
			if err != nil {
				fmt.Printf("status %s %s error %v\n", h, how, strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			fmt.Printf("status %s %s %s\n", h, how, code)
		}
	}
}

func ask(proxyAddr, host, how string) (string, error) {
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	hp := net.JoinHostPort(host, "80")
	if how == "connect" {
		hp = net.JoinHostPort(host, "443")
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hp, hp)
	} else {
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hp, hp)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read the proxy's answer: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return "", fmt.Errorf("answer %q", line)
	}
	return f[1], nil
}
