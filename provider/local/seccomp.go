package local

// The seccomp filter of every command in an isolated sandbox, in the spirit of the
// container runtimes' default profile: a deny list of what a sandbox never needs and
// what has been a way out of containers — the kernel's keyrings (shared with the host:
// a user namespace does not separate them), mounts, namespaces (no nested user
// namespace: root there could mount), kernel modules, kexec, bpf, perf, handles,
// reboot, swap, accounting, userfaultfd, io_uring — and clone/unshare with namespace
// flags. clone3 answers ENOSYS so libc falls back to clone, whose flags the filter can
// read. Other architectures' system calls (32-bit compat, x32) are refused. The
// filter is assembled here from classic BPF (no cgo, no library) and installed by the
// spawner on its forking thread, so every command inherits it.

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data.
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16 // the low 32 bits on little-endian machines
)

// nsCloneFlags are clone's namespace flags; unshare also has CLONE_NEWTIME (0x80,
// which in clone's flags is part of the exit signal).
const (
	nsCloneFlags   = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	nsUnshareFlags = nsCloneFlags | unix.CLONE_NEWTIME
)

// deniedSyscalls answer EPERM.
var deniedSyscalls = append([]uintptr{
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN,
	unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SETNS, unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE,
	unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE, unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_REBOOT, unix.SYS_SWAPON,
	unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_USERFAULTFD, unix.SYS_QUOTACTL, unix.SYS_SYSLOG,
	unix.SYS_LOOKUP_DCOOKIE, unix.SYS_VHANGUP, unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER,
	unix.SYS_IO_URING_REGISTER, unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME,
	unix.SYS_ADJTIMEX,
}, archDenied...)

// bpfProg is a classic BPF program with symbolic jump targets.
type bpfProg struct {
	ins    []unix.SockFilter
	jumps  map[int][2]string // instruction -> (jt, jf) labels; "" is the next one
	labels map[string]int
}

func newBPF() *bpfProg {
	return &bpfProg{jumps: map[int][2]string{}, labels: map[string]int{}}
}

func (p *bpfProg) label(name string) { p.labels[name] = len(p.ins) }

func (p *bpfProg) stmt(code uint16, k uint32) {
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k})
}

// jump adds a conditional jump (code with BPF_K) to jt when true, jf when false.
func (p *bpfProg) jump(code uint16, k uint32, jt, jf string) {
	p.jumps[len(p.ins)] = [2]string{jt, jf}
	p.stmt(code, k)
}

// assemble resolves the labels; a jump only goes forward, at most 255 instructions.
func (p *bpfProg) assemble() ([]unix.SockFilter, error) {
	out := append([]unix.SockFilter(nil), p.ins...)
	for i, j := range p.jumps {
		for n, name := range j {
			off := 0
			if name != "" {
				at, ok := p.labels[name]
				if !ok {
					return nil, fmt.Errorf("bpf: no label %q", name)
				}
				off = at - i - 1
			}
			if off < 0 || off > 255 {
				return nil, fmt.Errorf("bpf: jump %d to %q is out of range", i, name)
			}
			if n == 0 {
				out[i].Jt = uint8(off)
			} else {
				out[i].Jf = uint8(off)
			}
		}
	}
	return out, nil
}

// seccompFilter assembles the sandbox's filter for this architecture.
func seccompFilter() ([]unix.SockFilter, error) {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	p := newBPF()
	p.stmt(ld, seccompArch)
	p.jump(jeq, auditArch, "", "deny")
	p.stmt(ld, seccompNr)
	if foreignNrFloor > 0 {
		p.jump(jge, foreignNrFloor, "deny", "")
	}
	for _, nr := range deniedSyscalls {
		p.jump(jeq, uint32(nr), "deny", "")
	}
	p.jump(jeq, unix.SYS_CLONE3, "enosys", "")
	p.jump(jeq, unix.SYS_CLONE, "clone", "")
	p.jump(jeq, unix.SYS_UNSHARE, "unshare", "")
	p.stmt(ret, unix.SECCOMP_RET_ALLOW)
	p.label("clone")
	p.stmt(ld, seccompArg0+cloneFlagsArg*8)
	p.jump(jset, nsCloneFlags, "deny", "")
	p.stmt(ret, unix.SECCOMP_RET_ALLOW)
	p.label("unshare")
	p.stmt(ld, seccompArg0)
	p.jump(jset, nsUnshareFlags, "deny", "")
	p.stmt(ret, unix.SECCOMP_RET_ALLOW)
	p.label("deny")
	p.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	p.label("enosys")
	p.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	return p.assemble()
}

// installSeccomp installs the filter on the calling thread (and so on every process it
// forks). The spawner may: it holds CAP_SYS_ADMIN in its user namespace, so setuid
// programs inside (sudo) keep working without no_new_privs.
func installSeccomp() error {
	if auditArch == 0 {
		return errors.New("no seccomp filter for this architecture")
	}
	ins, err := seccompFilter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return e
	}
	return nil
}
