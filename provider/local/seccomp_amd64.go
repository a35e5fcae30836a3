package local

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// foreignNrFloor: x32 system calls have bit 30 set.
	foreignNrFloor = 0x40000000
	// cloneFlagsArg is the argument of clone that holds its flags.
	cloneFlagsArg = 0
)

// archDenied are the x86-only calls the filter refuses.
var archDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS,
	unix.SYS_QUERY_MODULE, unix.SYS_USELIB, unix.SYS_USTAT, unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_NFSSERVCTL}
