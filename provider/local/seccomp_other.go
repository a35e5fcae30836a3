//go:build !amd64 && !arm64

package local

const (
	auditArch      = 0
	foreignNrFloor = 0
	cloneFlagsArg  = 0
)

var archDenied []uintptr
