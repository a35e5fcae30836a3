package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
)

// The sandboxes an Engine knows: each a box holding its one state record
// (package state), loaded from the data dir and checked for life on use.

// saveState writes the sandbox's record.
func (e *Engine) saveState(st state.Record) error { return state.Save(e.sandboxDir(st.ID), st) }

// adopt loads every sandbox of the data dir.
func (e *Engine) adopt() error {
	entries, err := os.ReadDir(filepath.Join(e.dir, "sandboxes"))
	if err != nil {
		return err
	}
	for _, ent := range entries {
		bx, err := e.load(ent.Name())
		if err != nil {
			continue // a create that never finished (Terminate removes it), or not a sandbox's
		}
		e.boxes[bx.st.ID] = bx
		e.refresh(bx) // a sandbox found dead is marked so
	}
	return nil
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
	if bx.st.InitAlive() {
		if bx.st.Paused {
			return engine.StatePaused
		}
		return engine.StateRunning
	}
	bx.st.Dead = true
	// The shim records init's exit code once it has reaped it.
	for deadline := time.Now().Add(2 * time.Second); bx.st.ShimAlive() && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
	if code := state.ReadExitCode(e.sandboxDir(bx.st.ID)); code != nil {
		bx.st.ExitCode = code
	}
	_ = e.saveState(bx.st)
	return engine.StateDead
}

func (e *Engine) info(bx *box) engine.Info {
	now := e.refresh(bx)
	bx.mu.Lock()
	defer bx.mu.Unlock()
	st := bx.st
	info := engine.Info{ID: st.ID, Name: st.Name, State: now, Created: st.Created,
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
	if !state.Exists(e.sandboxDir(id)) {
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
	st, err := state.Load(e.sandboxDir(id), id)
	if err != nil {
		return nil, err
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

// all brings the in-memory set in line with the data dir and returns its sandboxes,
// in no order; e.mu is not held after it, so each may be refreshed.
func (e *Engine) all() []*box {
	e.sync()
	e.mu.Lock()
	defer e.mu.Unlock()
	boxes := make([]*box, 0, len(e.boxes))
	for _, bx := range e.boxes {
		boxes = append(boxes, bx)
	}
	return boxes
}

// running returns the sandbox when it is alive (running or paused).
func (e *Engine) running(id string) (*box, state.Record, error) {
	bx, err := e.lookup(id)
	if err != nil {
		return nil, state.Record{}, err
	}
	if e.refresh(bx) == engine.StateDead {
		return nil, state.Record{}, fmt.Errorf("sandbox %q is dead: %w", id, engine.ErrNotFound)
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
	boxes := e.all()
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
