// Package cgroup holds the local engine's cgroups of a sandbox: the freezer for pause
// and resume, memory, pids and CPU for limits, devices against block devices. Each
// sandbox gets a child of the controlling process's own cgroup in every usable
// hierarchy (cgroup v1 controllers, or cgroup v2). What cannot be created or written
// is simply not applied, and Info.Applied says what was. Package local, the engine,
// is its one importer.
package cgroup

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Hierarchies are this process's cgroups that accept children, one per usable
// hierarchy; the zero value has none (nothing is limited or frozen).
type Hierarchies struct {
	v1 map[string]string // controller -> the directory of this process's cgroup
	v2 string            // this process's cgroup v2 directory, when usable
}

const root = "/sys/fs/cgroup"

// Detect finds this process's cgroups that accept children.
func Detect() Hierarchies {
	cg := Hierarchies{v1: map[string]string{}}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return cg
	}
	defer f.Close()
	unified := root
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		unified = filepath.Join(root, "unified")
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
				if d := filepath.Join(root, c, parts[2]); usableCgroup(d) {
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

// Freezer reports whether sandboxes can be paused: a freezer of v1, or v2.
func (c Hierarchies) Freezer() bool { return c.v1["freezer"] != "" || c.v2 != "" }

// Limits reports whether any limit can be applied: memory, pids or cpu of v1, or v2.
func (c Hierarchies) Limits() bool {
	return c.v1["memory"] != "" || c.v1["pids"] != "" || c.v1["cpu"] != "" || c.v2 != ""
}

// Controls reports whether the controller ("memory", "pids", "cpu", "freezer") is
// usable, in v1 or v2.
func (c Hierarchies) Controls(controller string) bool { return c.v1[controller] != "" || c.v2 != "" }

func writeCg(dir, file, value string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644)
}

// Make creates the sandbox id's cgroups (Name(id)), one per usable hierarchy, with
// the limits they can set; each hierarchy in parallel (a memory cgroup of v1 can take
// tens of milliseconds to make). It returns the limits that hold and the groups'
// directories. It runs before init exists; Enter puts init in.
func (c Hierarchies) Make(id string, l engine.Limits) (engine.Limits, []string) {
	name := Name(id)
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	type group struct {
		dir   string
		files [][2]string // written in order; the limit holds when all are
		limit *int64      // the applied field it sets
		value int64
	}
	var applied engine.Limits
	var want []group
	if c.v2 != "" && (c.v1["freezer"] == "" || c.v1["memory"] == "" || c.v1["pids"] == "" || c.v1["cpu"] == "" && l.CPUMillis > 0) {
		// Controllers for the children, where the parent allows it.
		for _, ctl := range []string{"+memory", "+pids", "+cpu"} {
			_ = writeCg(c.v2, "cgroup.subtree_control", ctl)
		}
		d := filepath.Join(c.v2, name)
		want = append(want, group{dir: d})
		if l.MemoryBytes > 0 && c.v1["memory"] == "" {
			want = append(want, group{dir: d, files: [][2]string{{"memory.max", itoa(l.MemoryBytes)}, {"memory.swap.max", "0"}}, limit: &applied.MemoryBytes, value: l.MemoryBytes})
		}
		if l.Pids > 0 && c.v1["pids"] == "" {
			want = append(want, group{dir: d, files: [][2]string{{"pids.max", itoa(l.Pids)}}, limit: &applied.Pids, value: l.Pids})
		}
		if l.CPUMillis > 0 && c.v1["cpu"] == "" {
			want = append(want, group{dir: d, files: [][2]string{{"cpu.max", itoa(l.CPUMillis*100) + " 100000"}}, limit: &applied.CPUMillis, value: l.CPUMillis})
		}
	}
	v1 := func(ctl string, g group) {
		if base := c.v1[ctl]; base != "" {
			g.dir = filepath.Join(base, name)
			want = append(want, g)
		}
	}
	v1("freezer", group{})
	// No block device, whatever a process inside creates or is handed.
	v1("devices", group{files: [][2]string{{"devices.deny", "b *:* rwm"}}})
	if l.MemoryBytes > 0 {
		v1("memory", group{files: [][2]string{{"memory.limit_in_bytes", itoa(l.MemoryBytes)}}, limit: &applied.MemoryBytes, value: l.MemoryBytes})
	}
	if l.CPUMillis > 0 {
		v1("cpu", group{files: [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", itoa(l.CPUMillis * 100)}}, limit: &applied.CPUMillis, value: l.CPUMillis})
	}
	if l.Pids > 0 {
		v1("pids", group{files: [][2]string{{"pids.max", itoa(l.Pids)}}, limit: &applied.Pids, value: l.Pids})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	made := map[string]bool{}
	for _, g := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := os.Mkdir(g.dir, 0o755); err != nil && !os.IsExist(err) {
				return
			}
			ok := true
			for _, f := range g.files {
				ok = ok && writeCg(g.dir, f[0], f[1]) == nil
			}
			if len(g.files) > 0 && g.files[0][0] == "memory.limit_in_bytes" {
				// Swap counts too, where the kernel accounts it.
				_ = writeCg(g.dir, "memory.memsw.limit_in_bytes", itoa(l.MemoryBytes))
			}
			mu.Lock()
			made[g.dir] = true
			if ok && g.limit != nil {
				*g.limit = g.value
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	groups := make([]string, 0, len(made))
	for d := range made {
		groups = append(groups, d)
	}
	slices.Sort(groups)
	return applied, groups
}

// Enter puts pid into every group.
func (c Hierarchies) Enter(groups []string, pid int) {
	for _, g := range groups {
		_ = writeCg(g, "cgroup.procs", strconv.Itoa(pid))
	}
}

// freezerOf returns the group of groups that freezes and whether it is cgroup v1.
func (c Hierarchies) freezerOf(groups []string) (string, bool) {
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

// SetFrozen stops (or, not frozen, restarts) every process of the groups and waits
// until the kernel says it is done; without a freezer it refuses with
// engine.ErrUnsupported.
func (c Hierarchies) SetFrozen(groups []string, frozen bool) error {
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

// Thaw restarts the groups' processes if they are frozen, so they can be killed.
func (c Hierarchies) Thaw(groups []string) {
	if g, _ := c.freezerOf(groups); g != "" {
		_ = c.SetFrozen(groups, false)
	}
}

// Remove deletes the groups once their processes are gone. A v1 pids group can
// stay busy for a while after its last process died on a loaded machine, so each
// group is retried for up to removeWait; what still stands then is left
// to Sweep at the next engine start.
func (c Hierarchies) Remove(groups []string) {
	for _, g := range groups {
		deadline := time.Now().Add(removeWait)
		for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
			if err := os.Remove(g); err == nil || os.IsNotExist(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(wait)
		}
	}
}

// removeWait bounds how long Remove retries one busy group.
const removeWait = 5 * time.Second

// Name is the name of the sandbox id's cgroup in every hierarchy.
func Name(id string) string { return "sandbox-" + id }

// SandboxPrefix starts the name of every sandbox's cgroup (Name of an id "sb-…").
const SandboxPrefix = "sandbox-sb-"

// Sweep removes the groups, in every usable hierarchy, whose names start with
// prefix, that hold no process and are older than minAge: groups that a
// terminate could not remove in time. A live sandbox's groups always hold its
// init, and a group being made gets init within milliseconds, so minAge keeps
// a create in progress (of this or another engine) safe. A group that turns
// busy is simply left (rmdir refuses a cgroup with processes).
func (c Hierarchies) Sweep(prefix string, minAge time.Duration) {
	dirs := slices.Collect(maps.Values(c.v1))
	if c.v2 != "" {
		dirs = append(dirs, c.v2)
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, ent := range ents {
			if !ent.IsDir() || !strings.HasPrefix(ent.Name(), prefix) {
				continue
			}
			g := filepath.Join(d, ent.Name())
			fi, err := os.Stat(g)
			if err != nil || time.Since(fi.ModTime()) < minAge {
				continue
			}
			if procs, err := os.ReadFile(filepath.Join(g, "cgroup.procs")); err == nil && len(procs) == 0 {
				_ = os.Remove(g)
			}
		}
	}
}
