// Package hostengine is a small engine.Engine for protocol tests: a sandbox is a
// directory that holds the sandbox's absolute paths, commands run as real processes
// on this machine (cwd and HOME inside that directory), and ports are the host's
// loopback. It has no isolation: commands that name absolute paths reach the host's.
// The real engine (provider/local) is what end-to-end tests use.
package hostengine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Engine is the host engine; New makes one.
type Engine struct {
	root string

	mu    sync.Mutex
	n     int
	boxes map[string]*hostBox
	snaps map[string]string
}

type hostBox struct {
	info engine.Info
	spec engine.Spec
	dir  string
	pgs  map[int]bool
}

// New returns an Engine keeping its sandboxes under root.
func New(root string) *Engine {
	return &Engine{root: root, boxes: map[string]*hostBox{}, snaps: map[string]string{}}
}

func (e *Engine) Capabilities() engine.Capabilities { return engine.Capabilities{Snapshot: true} }

func (e *Engine) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	e.mu.Lock()
	e.n++
	id := fmt.Sprintf("h%d", e.n)
	e.mu.Unlock()
	dir := filepath.Join(e.root, id)
	if spec.Snapshot != "" {
		e.mu.Lock()
		src, ok := e.snaps[spec.Snapshot]
		e.mu.Unlock()
		if !ok {
			return engine.Info{}, fmt.Errorf("snapshot %s: %w", spec.Snapshot, engine.ErrNotFound)
		}
		if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
			return engine.Info{}, err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "home/user"), 0o755); err != nil {
		return engine.Info{}, err
	}
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
	b := &hostBox{spec: spec, dir: dir, pgs: map[int]bool{},
		info: engine.Info{ID: id, Name: spec.Name, State: engine.StateRunning, Created: time.Now(), Labels: spec.Labels,
			Home: filepath.Join(dir, "home/user")}}
	e.mu.Lock()
	e.boxes[id] = b
	e.mu.Unlock()
	return b.info, nil
}

func (e *Engine) box(id string) (*hostBox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.boxes[id]
	if !ok || b.info.State == engine.StateDead {
		return nil, fmt.Errorf("sandbox %s: %w", id, engine.ErrNotFound)
	}
	return b, nil
}

func (e *Engine) Get(ctx context.Context, id string) (engine.Info, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.boxes[id]
	if !ok {
		return engine.Info{}, fmt.Errorf("sandbox %s: %w", id, engine.ErrNotFound)
	}
	return b.info, nil
}

func (e *Engine) List(ctx context.Context) ([]engine.Info, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []engine.Info
	for _, b := range e.boxes {
		out = append(out, b.info)
	}
	return out, nil
}

// path maps a sandbox path into the sandbox's directory.
func (b *hostBox) path(p string) string { return filepath.Join(b.dir, filepath.Clean("/"+p)) }

func (e *Engine) Exec(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	b, err := e.box(id)
	if err != nil {
		return -1, err
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Dir = b.path("/home/user")
	if req.Cwd != "" {
		cmd.Dir = b.path(req.Cwd)
	}
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.path("/home/user")}, b.spec.Env...), req.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	if cmd.Stderr == nil {
		cmd.Stderr = io.Discard
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return 127, nil
	}
	pg := cmd.Process.Pid
	e.mu.Lock()
	b.pgs[pg] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(b.pgs, pg)
		e.mu.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			syscall.Kill(-pg, syscall.SIGKILL)
		case <-done:
		}
	}()
	err = cmd.Wait()
	close(done)
	if ctx.Err() == context.DeadlineExceeded {
		return 124, engine.ErrTimeout
	}
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func (e *Engine) ReadFile(ctx context.Context, id, p string) ([]byte, error) {
	b, err := e.box(id)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(b.path(p))
}

func (e *Engine) WriteFile(ctx context.Context, id, p string, data []byte, mode uint32) error {
	b, err := e.box(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(b.path(p)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(b.path(p), data, fs.FileMode(mode))
}

func (e *Engine) ListFiles(ctx context.Context, id, dir string) ([]engine.FileInfo, error) {
	b, err := e.box(id)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(b.path(dir))
	if err != nil {
		return nil, err
	}
	var out []engine.FileInfo
	for _, d := range ents {
		fi, err := d.Info()
		if err != nil {
			continue
		}
		out = append(out, fileInfo(filepath.Join(dir, d.Name()), fi))
	}
	return out, nil
}

func fileInfo(p string, fi fs.FileInfo) engine.FileInfo {
	return engine.FileInfo{Name: fi.Name(), Path: p, Size: fi.Size(), Mode: uint32(fi.Mode()), IsDir: fi.IsDir(), ModTime: fi.ModTime()}
}

func (e *Engine) Stat(ctx context.Context, id, p string) (engine.FileInfo, error) {
	b, err := e.box(id)
	if err != nil {
		return engine.FileInfo{}, err
	}
	fi, err := os.Stat(b.path(p))
	if err != nil {
		return engine.FileInfo{}, err
	}
	return fileInfo(p, fi), nil
}

func (e *Engine) MkdirAll(ctx context.Context, id, p string) error {
	b, err := e.box(id)
	if err != nil {
		return err
	}
	return os.MkdirAll(b.path(p), 0o755)
}

func (e *Engine) Remove(ctx context.Context, id, p string) error {
	b, err := e.box(id)
	if err != nil {
		return err
	}
	return os.RemoveAll(b.path(p))
}

func (e *Engine) Snapshot(ctx context.Context, id string) (string, error) {
	b, err := e.box(id)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.n++
	sid := fmt.Sprintf("snap%d", e.n)
	e.mu.Unlock()
	dst := filepath.Join(e.root, sid)
	if err := os.CopyFS(dst, os.DirFS(b.dir)); err != nil {
		return "", err
	}
	e.mu.Lock()
	e.snaps[sid] = dst
	e.mu.Unlock()
	return sid, nil
}

func (e *Engine) Pause(ctx context.Context, id string) error  { return engine.ErrUnsupported }
func (e *Engine) Resume(ctx context.Context, id string) error { return engine.ErrUnsupported }

func (e *Engine) Terminate(ctx context.Context, id string) error {
	e.mu.Lock()
	b, ok := e.boxes[id]
	if !ok || b.info.State == engine.StateDead {
		e.mu.Unlock()
		return nil
	}
	b.info.State = engine.StateDead
	code := 137
	b.info.ExitCode = &code
	var pgs []int
	for pg := range b.pgs {
		pgs = append(pgs, pg)
	}
	e.mu.Unlock()
	for _, pg := range pgs {
		syscall.Kill(-pg, syscall.SIGKILL)
	}
	return nil
}

func (e *Engine) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := e.box(id); err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
}

func (e *Engine) Close() error {
	e.mu.Lock()
	var ids []string
	for id := range e.boxes {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		e.Terminate(context.Background(), id)
	}
	return nil
}

var _ engine.Engine = (*Engine)(nil)
