package local

// Cgroups of a sandbox: the freezer for pause and resume, memory and pids for limits.
// Each sandbox gets a child of the controlling process's own cgroup in every usable
// hierarchy (cgroup v1 controllers, or cgroup v2). What cannot be created or written
// is simply not applied, and Info.Applied says what was.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

type cgroups struct {
	v1 map[string]string // controller -> the directory of this process's cgroup
	v2 string            // this process's cgroup v2 directory, when usable
}

const cgroupRoot = "/sys/fs/cgroup"

// detectCgroups finds this process's cgroups that accept children.
func detectCgroups() cgroups {
	cg := cgroups{v1: map[string]string{}}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return cg
	}
	defer f.Close()
	unified := cgroupRoot
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		unified = filepath.Join(cgroupRoot, "unified")
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			if d := filepath.Join(unified, parts[2]); usableCgroup(d) {
				cg.v2 = d
			}
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			switch c {
			case "freezer", "memory", "pids", "devices", "cpu":
				if d := filepath.Join(cgroupRoot, c, parts[2]); usableCgroup(d) {
					cg.v1[c] = d
				}
			}
		}
	}
	return cg
}

// usableCgroup reports whether a child cgroup can be made under d.
func usableCgroup(d string) bool {
	if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
		return false
	}
	p := filepath.Join(d, "sandbox-probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil {
		return false
	}
	os.Remove(p)
	return true
}

func (c cgroups) freezer() bool { return c.v1["freezer"] != "" || c.v2 != "" }
func (c cgroups) limits() bool {
	return c.v1["memory"] != "" || c.v1["pids"] != "" || c.v1["cpu"] != "" || c.v2 != ""
}

func writeCg(dir, file, value string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644)
}

// join puts pid into a new cgroup per usable hierarchy, with the limits it can set.
func (c cgroups) join(id string, pid int, l engine.Limits) (engine.Limits, []string) {
	var applied engine.Limits
	var groups []string
	name := "sandbox-" + id
	procs := strconv.Itoa(pid)
	add := func(dir string) bool {
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return false
		}
		groups = append(groups, dir)
		return true
	}
	if c.v2 != "" && (c.v1["freezer"] == "" || c.v1["memory"] == "" && l.MemoryBytes > 0 || c.v1["pids"] == "" && l.Pids > 0 ||
		c.v1["cpu"] == "" && l.CPUMillis > 0) {
		// Controllers for the children, where the parent allows it.
		for _, ctl := range []string{"+memory", "+pids", "+cpu"} {
			_ = writeCg(c.v2, "cgroup.subtree_control", ctl)
		}
		d := filepath.Join(c.v2, name)
		if add(d) {
			if l.MemoryBytes > 0 && c.v1["memory"] == "" && writeCg(d, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)) == nil {
				_ = writeCg(d, "memory.swap.max", "0")
				applied.MemoryBytes = l.MemoryBytes
			}
			if l.Pids > 0 && c.v1["pids"] == "" && writeCg(d, "pids.max", strconv.FormatInt(l.Pids, 10)) == nil {
				applied.Pids = l.Pids
			}
			if l.CPUMillis > 0 && c.v1["cpu"] == "" && writeCg(d, "cpu.max", strconv.FormatInt(l.CPUMillis*100, 10)+" 100000") == nil {
				applied.CPUMillis = l.CPUMillis
			}
			_ = writeCg(d, "cgroup.procs", procs)
		}
	}
	if base := c.v1["freezer"]; base != "" {
		if d := filepath.Join(base, name); add(d) {
			_ = writeCg(d, "cgroup.procs", procs)
		}
	}
	if base := c.v1["devices"]; base != "" {
		// No block device, whatever a process inside creates or is handed.
		if d := filepath.Join(base, name); add(d) {
			_ = writeCg(d, "devices.deny", "b *:* rwm")
			_ = writeCg(d, "cgroup.procs", procs)
		}
	}
	if base := c.v1["memory"]; base != "" && l.MemoryBytes > 0 {
		if d := filepath.Join(base, name); add(d) {
			if writeCg(d, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)) == nil {
				_ = writeCg(d, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
				applied.MemoryBytes = l.MemoryBytes
			}
			_ = writeCg(d, "cgroup.procs", procs)
		}
	}
	if base := c.v1["cpu"]; base != "" && l.CPUMillis > 0 {
		if d := filepath.Join(base, name); add(d) {
			if writeCg(d, "cpu.cfs_period_us", "100000") == nil &&
				writeCg(d, "cpu.cfs_quota_us", strconv.FormatInt(l.CPUMillis*100, 10)) == nil {
				applied.CPUMillis = l.CPUMillis
			}
			_ = writeCg(d, "cgroup.procs", procs)
		}
	}
	if base := c.v1["pids"]; base != "" && l.Pids > 0 {
		if d := filepath.Join(base, name); add(d) {
			if writeCg(d, "pids.max", strconv.FormatInt(l.Pids, 10)) == nil {
				applied.Pids = l.Pids
			}
			_ = writeCg(d, "cgroup.procs", procs)
		}
	}
	return applied, groups
}

// freezerOf returns the group of groups that freezes and whether it is cgroup v1.
func (c cgroups) freezerOf(groups []string) (string, bool) {
	for _, g := range groups {
		if c.v1["freezer"] != "" && strings.HasPrefix(g, c.v1["freezer"]+"/") {
			return g, true
		}
	}
	for _, g := range groups {
		if c.v2 != "" && strings.HasPrefix(g, c.v2+"/") {
			return g, false
		}
	}
	return "", false
}

// freeze stops (or, with thaw, restarts) every process of the groups and waits
// until the kernel says it is done.
func (c cgroups) setFrozen(groups []string, frozen bool) error {
	g, v1 := c.freezerOf(groups)
	if g == "" {
		return fmt.Errorf("no freezer cgroup: %w", engine.ErrUnsupported)
	}
	file, value, want := "cgroup.freeze", "0", "frozen 0"
	if frozen {
		value, want = "1", "frozen 1"
	}
	if v1 {
		file, value = "freezer.state", "THAWED"
		if frozen {
			value = "FROZEN"
		}
		want = value
	}
	if err := writeCg(g, file, value); err != nil {
		return err
	}
	check := filepath.Join(g, file)
	if !v1 {
		check = filepath.Join(g, "cgroup.events")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(check)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s did not become %q", g, want)
		}
		if v1 {
			_ = writeCg(g, file, value) // FREEZING can need another nudge
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (c cgroups) thaw(groups []string) {
	if g, _ := c.freezerOf(groups); g != "" {
		_ = c.setFrozen(groups, false)
	}
}

// remove deletes the groups once their processes are gone.
func (c cgroups) remove(groups []string) {
	for _, g := range groups {
		for range 100 {
			if err := os.Remove(g); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
