package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func (e *Engine) saveState(st boxState) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return writeFileAtomic(filepath.Join(e.sandboxDir(st.ID), fileState), b, 0o600)
}

// adopt loads every sandbox of the data dir.
func (e *Engine) adopt() error {
	entries, err := os.ReadDir(filepath.Join(e.dir, "sandboxes"))
	if err != nil {
		return err
	}
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join(e.sandboxDir(ent.Name()), fileState))
		if err != nil {
			continue // a create that never finished; Terminate removes it
		}
		var st boxState
		if json.Unmarshal(b, &st) != nil || st.ID != ent.Name() {
			continue
		}
		bx := &box{st: st}
		e.boxes[st.ID] = bx
		e.refresh(bx) // a sandbox found dead is marked so
	}
	return nil
}

// procStart returns the start time (clock ticks since boot) and state of pid.
func procStart(pid int) (uint64, byte, bool) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, 0, false
	}
	return st.Start, st.State, true
}

// initAlive reports whether the sandbox's init still runs.
func initAlive(st boxState) bool {
	if st.Pid <= 0 {
		return false
	}
	start, state, ok := procStart(st.Pid)
	return ok && start == st.PidStart && state != 'Z' && state != 'X'
}

// shimAlive reports whether the sandbox's shim still runs.
func shimAlive(st boxState) bool {
	if st.ShimPid <= 0 {
		return false
	}
	start, state, ok := procStart(st.ShimPid)
	return ok && start == st.ShimStart && state != 'Z' && state != 'X'
}

// refresh returns the sandbox's state, marking it dead (and saving that) when its
// init is gone. bx.mu must not be held.
func (e *Engine) refresh(bx *box) engine.State {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return e.refreshLocked(bx)
}

func (e *Engine) refreshLocked(bx *box) engine.State {
	if bx.st.Dead || bx.gone {
		return engine.StateDead
	}
	if initAlive(bx.st) {
		if bx.st.Paused {
			return engine.StatePaused
		}
		return engine.StateRunning
	}
	bx.st.Dead = true
	// The shim records init's exit code once it has reaped it.
	for deadline := time.Now().Add(2 * time.Second); shimAlive(bx.st) && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(e.sandboxDir(bx.st.ID), fileExit)); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			bx.st.ExitCode = &n
		}
	}
	_ = e.saveState(bx.st)
	return engine.StateDead
}

func (e *Engine) info(bx *box) engine.Info {
	state := e.refresh(bx)
	bx.mu.Lock()
	defer bx.mu.Unlock()
	st := bx.st
	info := engine.Info{ID: st.ID, Name: st.Name, State: state, Created: st.Created,
		Tunnels: slices.Clone(st.Tunnels), Labels: st.Spec.Labels, Isolated: st.Isolated,
		Home: e.homeOf(st), Applied: st.Applied, ExitCode: st.ExitCode, Runtime: st.Runtime,
		Volumes: slices.Clone(st.Spec.Volumes)}
	if st.Image != nil {
		info.Image = st.Image.ID
	}
	return info
}

// lookup finds a sandbox in memory or, made by another Engine on the same data dir,
// on disk. A sandbox whose directory is gone (terminated elsewhere) is forgotten.
func (e *Engine) lookup(id string) (*box, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !validEngineID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, engine.ErrNotFound)
	}
	bx, ok := e.boxes[id]
	if _, err := os.Stat(filepath.Join(e.sandboxDir(id), fileState)); err != nil {
		if ok && !e.creating(bx) {
			delete(e.boxes, id)
		}
		if ok && e.creating(bx) {
			return bx, nil
		}
		return nil, fmt.Errorf("sandbox %q: %w", id, engine.ErrNotFound)
	}
	if ok {
		return bx, nil
	}
	bx, err := e.load(id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, engine.ErrNotFound)
	}
	e.boxes[id] = bx
	return bx, nil
}

// creating reports whether bx is a Create of this Engine still under way.
func (e *Engine) creating(bx *box) bool {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx.pending
}

// load reads a sandbox's state from its directory.
func (e *Engine) load(id string) (*box, error) {
	b, err := os.ReadFile(filepath.Join(e.sandboxDir(id), fileState))
	if err != nil {
		return nil, err
	}
	var st boxState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	if st.ID != id {
		return nil, errors.New("state of another sandbox")
	}
	return &box{st: st}, nil
}

// sync brings the in-memory set in line with the data dir (other Engines may create
// and terminate sandboxes there).
func (e *Engine) sync() {
	entries, err := os.ReadDir(filepath.Join(e.dir, "sandboxes"))
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, ent := range entries {
		seen[ent.Name()] = true
		_, _ = e.lookup(ent.Name())
	}
	e.mu.Lock()
	for id, bx := range e.boxes {
		if !seen[id] && !e.creating(bx) {
			delete(e.boxes, id)
		}
	}
	e.mu.Unlock()
}

// running returns the sandbox when it is alive (running or paused).
func (e *Engine) running(id string) (*box, boxState, error) {
	bx, err := e.lookup(id)
	if err != nil {
		return nil, boxState{}, err
	}
	if e.refresh(bx) == engine.StateDead {
		return nil, boxState{}, fmt.Errorf("sandbox %q is dead: %w", id, engine.ErrNotFound)
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx, bx.st, nil
}

// Get describes one sandbox.
func (e *Engine) Get(ctx context.Context, id string) (engine.Info, error) {
	bx, err := e.lookup(id)
	if err != nil {
		return engine.Info{}, err
	}
	return e.info(bx), nil
}

// List describes every known sandbox, oldest first, each checked for life.
func (e *Engine) List(ctx context.Context) ([]engine.Info, error) {
	e.sync()
	e.mu.Lock()
	boxes := make([]*box, 0, len(e.boxes))
	for _, bx := range e.boxes {
		boxes = append(boxes, bx)
	}
	e.mu.Unlock()
	out := make([]engine.Info, 0, len(boxes))
	for _, bx := range boxes {
		out = append(out, e.info(bx))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
