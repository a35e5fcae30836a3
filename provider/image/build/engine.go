package build

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// BuildEngine is what EngineRunner needs of an engine: sandboxes that boot from the
// store's images (the engine's ImageResolver is the same store) and the host path of a
// sandbox's upper layer ((*local.Engine).UpperDir).
type BuildEngine interface {
	Create(ctx context.Context, spec engine.Spec) (engine.Info, error)
	Exec(ctx context.Context, id string, req engine.ExecRequest) (int, error)
	Terminate(ctx context.Context, id string) error
	UpperDir(id string) (string, error)
}

// EngineRunner runs each step in a sandbox of Engine booted from the parent image, in
// the sandbox's own network namespace with the egress proxy as its only way out (see
// egress.go), and returns the sandbox's upper layer as the step's layer; the sandbox is
// terminated once the store has the layer.
type EngineRunner struct {
	Engine BuildEngine
	// EgressHosts are the only hosts a step reaches (through the egress proxy; the
	// grammar of engine.Spec.EgressHosts); nil means DefaultEgressHosts(), an empty
	// non-nil list no network at all.
	EgressHosts []string
	// IDs maps the upper layer's host ids back to the sandbox's (the engine's user
	// namespace mapping); nil keeps them.
	IDs store.IDMap
	// Timeout bounds one step; zero means an hour.
	Timeout time.Duration
}

// Run implements Runner.
func (r EngineRunner) Run(ctx context.Context, req RunRequest) (Layer, error) {
	timeout := r.Timeout
	if timeout == 0 {
		timeout = time.Hour
	}
	hosts := r.EgressHosts
	if hosts == nil {
		hosts = DefaultEgressHosts()
	}
	info, err := r.Engine.Create(ctx, engine.Spec{Image: req.Parent.ID, Egress: len(hosts) > 0, EgressHosts: hosts,
		Env: req.Parent.Env, Timeout: timeout + time.Minute, Labels: map[string]string{"purpose": "image-build"}})
	if err != nil {
		return Layer{}, fmt.Errorf("build sandbox: %w", err)
	}
	done := func() { _ = r.Engine.Terminate(context.WithoutCancel(ctx), info.ID) }
	upper, err := r.Engine.UpperDir(info.ID)
	if err != nil {
		done()
		return Layer{}, err
	}
	booted, err := snapshotDir(upper)
	if err != nil {
		done()
		return Layer{}, err
	}
	log := req.Log
	if log == nil {
		log = io.Discard
	}
	argv := []string{"/bin/sh", "-c", req.Shell}
	if u := req.Parent.User; u != "" && u != "root" && u != "0" {
		argv = append([]string{"runuser", "-u", u, "--"}, argv...)
	}
	cwd := req.Parent.WorkDir
	if cwd == "" {
		cwd = "/"
	}
	code, err := r.Engine.Exec(ctx, info.ID, engine.ExecRequest{Argv: argv, Cwd: cwd, Timeout: timeout, Stdout: log, Stderr: log})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		done()
		return Layer{}, err
	}
	return Layer{Dir: upper, IDs: r.IDs, Skip: booted.unchanged, Done: done}, nil
}

// dirSnapshot is the change time of every entry of a folder.
type dirSnapshot map[string]syscall.Timespec

// snapshotDir records what the engine put in the upper layer at boot (mount points,
// the home and state folders), so that only the step's changes become its layer.
func snapshotDir(dir string) (dirSnapshot, error) {
	snap := dirSnapshot{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		snap[filepath.ToSlash(rel)] = st.Ctim
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the build sandbox's upper layer: %w", err)
	}
	return snap, nil
}

// unchanged is a store.SkipFunc: the entry was there at boot and has not changed since
// (a folder the step added to has a new change time).
func (s dirSnapshot) unchanged(rel string, st *syscall.Stat_t) bool {
	t, ok := s[rel]
	return ok && t == st.Ctim
}
