package main

// Parsers of `create`'s resource flags: sizes (--memory, --disk), CPUs (--cpus)
// and volumes (--volume). Their input is the user's command line: each is a table
// test and a fuzz target.

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// sizeUnit is the multiple of a size's suffix: none or B for bytes, else K, M, G or
// T, binary multiples as in docker and Kubernetes (also written KB, Ki, KiB), in any
// case.
func sizeUnit(u string) (int64, bool) {
	u = strings.ToLower(u)
	if u == "" || u == "b" {
		return 1, true
	}
	base, ok := map[byte]int64{'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30, 't': 1 << 40}[u[0]]
	switch u[1:] {
	case "", "b", "i", "ib":
		return base, ok
	}
	return 0, false
}

// parseSize parses a positive size such as 512M, 2G, 1.5G or 1048576 into bytes.
func parseSize(s string) (int64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	mult, ok := sizeUnit(s[len(num):])
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want K, M, G or T)", s, s[len(num):])
	}
	if num == "" || strings.ContainsAny(num, "eExXpP_") {
		return 0, fmt.Errorf("size %q: want a number and a unit, like 512M or 2G", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q: want a positive number and a unit, like 512M or 2G", s)
	}
	b := v * float64(mult)
	if b >= math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	if b < 1 {
		return 0, fmt.Errorf("size %q: less than a byte", s)
	}
	return int64(b), nil
}

// maxCPUs bounds --cpus: more is a typo, not a machine.
const maxCPUs = 4096

// parseCPUs parses a positive CPU count such as 2 or 1.5 into thousandths of a CPU.
func parseCPUs(s string) (int64, error) {
	if strings.ContainsAny(s, "eExXpP_") {
		return 0, fmt.Errorf("cpus %q: want a number like 2 or 1.5", s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v <= 0 || v > maxCPUs {
		return 0, fmt.Errorf("cpus %q: want a number above 0 and at most %d, like 2 or 1.5", s, maxCPUs)
	}
	m := int64(math.Round(v * 1000))
	if m < 1 {
		return 0, fmt.Errorf("cpus %q: less than a thousandth of a CPU", s)
	}
	return m, nil
}

// parseVolume parses NAME:/path[:ro|:rw] into a volume mount.
func parseVolume(s string) (engine.VolumeMount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return engine.VolumeMount{}, fmt.Errorf("volume %q: want NAME:/path[:ro]", s)
	}
	v := engine.VolumeMount{Name: parts[0], Target: parts[1]}
	if err := validVolumeName(v.Name); err != nil {
		return engine.VolumeMount{}, fmt.Errorf("volume %q: %w", s, err)
	}
	if !path.IsAbs(v.Target) || path.Clean(v.Target) != v.Target || v.Target == "/" {
		return engine.VolumeMount{}, fmt.Errorf("volume %q: the path must be absolute, clean and not /", s)
	}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			v.ReadOnly = true
		case "rw":
		default:
			return engine.VolumeMount{}, fmt.Errorf("volume %q: the mode must be ro or rw", s)
		}
	}
	return v, nil
}

// validVolumeName: 1–63 letters, digits, '.', '_' and '-', starting with a letter or
// digit, as Docker's volume names.
func validVolumeName(name string) error {
	if name == "" || len(name) > 63 {
		return errors.New("the name must have 1 to 63 characters")
	}
	for i, r := range name {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._-", r)) {
			return fmt.Errorf("the name %q may have letters, digits, '.', '_' and '-', and starts with a letter or digit", name)
		}
	}
	return nil
}
