package main

// Backends: what `--provider NAME` drives. A backend is one engine (engine.Engine):
// the local engine, Modal's or E2B's, with the one provider (provider.New) over it,
// which create uses to boot the platform's sandbox. Everything a create asks for one
// sandbox (--image, --memory, --volume, …) travels with that call, never with the
// backend. The local backend is made here; the Modal and E2B backends are made in
// serve_modal.go and serve_e2b.go, beside the servers of their protocols.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// backend is one engine as sandboxctl drives it.
type backend struct {
	// Engine runs list, exec, cp, snapshot, pause, resume, terminate and tunnels.
	Engine engine.Engine
	// Provider boots sandboxes on Engine with the boot plan (create).
	Provider *provider.Provider
	// Sidecar returns the sidecar URL and token of a sandbox (terminal, url, push).
	Sidecar func(ctx context.Context, id string) (url, token string, err error)
	// Close releases the backend; sandboxes keep running. Nil is fine.
	Close func() error
}

// newBackend is the backend of eng with the provider of kind over it.
func newBackend(eng engine.Engine, o backendOptions, po provider.Options) (*backend, error) {
	po.Getenv, po.Logger, po.Progress = o.Getenv, o.Logger, o.Stderr
	po.LLMKeysInSandbox = o.LLMKeysInSandbox
	p, err := provider.New(eng, po)
	if err != nil {
		eng.Close()
		return nil, err
	}
	return &backend{Engine: eng, Provider: p, Sidecar: p.Sidecar, Close: eng.Close}, nil
}

// backendOptions are the global settings a backend may use.
type backendOptions struct {
	// DataDir is --data-dir: where local state lives.
	DataDir string
	// Unisolated is --unisolated (local only).
	Unisolated bool
	Getenv     func(string) string
	// Stderr receives progress lines.
	Stderr io.Writer
	Logger *slog.Logger
	// LLMKeysInSandbox is create's --llm-keys-in-sandbox
	// (provider.Options.LLMKeysInSandbox).
	LLMKeysInSandbox bool
	// Images, for the local backend, is the image store its engine boots Spec.Image
	// from and commits image snapshots to; nil opens the data dir's.
	Images engine.ImageResolver
}

// backends maps --provider names to their constructors.
var backends = map[string]func(ctx context.Context, o backendOptions) (*backend, error){
	"local": newLocalBackend,
	"modal": newModalBackend,
	"e2b":   newE2BBackend,
}

// defaultDataDir is $SANDBOXCTL_DATA_DIR, else $XDG_DATA_HOME/sandboxctl, else
// ~/.local/share/sandboxctl.
func defaultDataDir(getenv func(string) string) string {
	if d := getenv(provider.EnvSandboxctlDataDir); d != "" {
		return d
	}
	if d := getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "sandboxctl")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".local", "share", "sandboxctl")
}

// findBinary returns the path of a binary sandboxctl binds into local sandboxes: the
// environment variable, else next to sandboxctl, else on PATH; "" when not found.
func findBinary(getenv func(string) string, envName, name string) string {
	if p := getenv(envName); p != "" {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return ""
}

// selfAs links dir/name to this executable and returns the link: started under
// that name, sandboxctl is that command (internal/cli), so a sandboxctl installed
// alone carries the sidecar and the CLI it puts into sandboxes.
func selfAs(dir, name string) (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", fmt.Errorf("find sandboxctl's own binary: %w", err)
	}
	link := filepath.Join(dir, name)
	if cur, err := os.Readlink(link); err == nil && cur == exe {
		return link, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := link + ".tmp-" + strconv.Itoa(os.Getpid())
	os.Remove(tmp)
	if err := os.Symlink(exe, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return link, nil
}

// carried is the binary sandboxctl binds into local sandboxes as name: a separate
// one when findBinary finds it, else sandboxctl itself acting as name.
func carried(o backendOptions, envName, name string) (string, error) {
	if p := findBinary(o.Getenv, envName, name); p != "" {
		return p, nil
	}
	p, err := selfAs(filepath.Join(o.DataDir, "bin"), name)
	if err != nil {
		return "", fmt.Errorf("no %s binary (set %s, or put it next to sandboxctl or on PATH), and sandboxctl cannot stand in: %w", name, envName, err)
	}
	return p, nil
}

func newLocalBackend(ctx context.Context, o backendOptions) (*backend, error) {
	mcp, err := carried(o, provider.EnvSandboxctlSandboxMCP, "sandbox-mcp")
	if err != nil {
		return nil, err
	}
	cli, err := carried(o, provider.EnvSandboxctlProliferate, "proliferate")
	if err != nil {
		return nil, err
	}
	images := o.Images
	if images == nil && !o.Unisolated {
		// The data dir's image store (sandboxctl image build): --image boots from it,
		// and the snapshot of a sandbox booted from an image is committed to it.
		s, err := store.Open(store.Options{Dir: imageStoreDir(o.DataDir)})
		if err != nil {
			return nil, err
		}
		images = s
	}
	eng, err := local.NewEngine(local.EngineOptions{DataDir: o.DataDir, Unisolated: o.Unisolated, SandboxMCP: mcp,
		Proliferate: cli, Logger: o.Logger, Images: images})
	if errors.Is(err, engine.ErrNotIsolated) {
		return nil, notIsolated(err)
	}
	if err != nil {
		return nil, err
	}
	mirrors, err := gitpush.New(gitpush.Options{CacheDir: filepath.Join(o.DataDir, "git-mirrors")})
	if err != nil {
		eng.Close()
		return nil, err
	}
	po := provider.Options{Kind: provider.KindLocal, GitMirrors: mirrors}
	if o.Unisolated {
		po.SandboxMCPCommand = mcp
	}
	return newBackend(eng, o, po)
}

func openBackend(ctx context.Context, name string, o backendOptions) (*backend, error) {
	f, ok := backends[name]
	if !ok {
		return nil, usageError{fmt.Errorf("unknown provider %q (known: %s)", name, knownNames(backends))}
	}
	return f(ctx, o)
}
