package coderun

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// replScript is the REPL server run by Deno in every session sandbox.
//
//go:embed runtime/repl.ts
var replScript []byte

// runtimePackages are the REPL server's own npm dependencies: a TypeScript type
// stripper and a JavaScript parser (to keep top-level declarations between calls).
var runtimePackages = map[string]string{"sucrase": "3.35.0", "acorn": "8.15.0"}

// registryHost is the only host the build sandbox may reach.
const registryHost = "registry.npmjs.org"

// SnapshotInfo describes the dependency snapshot.
type SnapshotInfo struct {
	// Name is deps-<configHash>.
	Name string `json:"name"`
	// ID is the engine's snapshot id or, with Image, the image's id in the image store.
	ID string `json:"id"`
	// Image: the snapshot is an image named Name on Base (sessions boot it with
	// Spec.Image); otherwise it is a copy snapshot (Spec.Snapshot).
	Image bool `json:"image,omitempty"`
	// Base is the image the snapshot was built on (with Image).
	Base string `json:"base,omitempty"`
	// Reused is true when the snapshot already existed.
	Reused bool `json:"reused"`
}

// ConfigHash hashes the dependency set (sorted names and versions) with the runtime
// (Deno's version, the REPL server and its packages) and, when the snapshot is an
// image, its base: a change to any rebuilds.
func (r *Runner) ConfigHash() string {
	var deps []string
	for _, d := range r.cfg.Dependencies {
		deps = append(deps, d.Package+"@"+d.Version)
	}
	slices.Sort(deps)
	h := sha256.New()
	for _, d := range deps {
		fmt.Fprintln(h, d)
	}
	fmt.Fprintln(h, "deno@"+r.o.DenoVersion, runtime.GOARCH)
	for _, k := range []string{"acorn", "sucrase"} {
		fmt.Fprintln(h, k+"@"+runtimePackages[k])
	}
	if r.imageStore() != nil {
		fmt.Fprintln(h, "image="+r.base)
	}
	fmt.Fprintln(h, "repl bundled")
	h.Write(replScript)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// SnapshotName is the name of the dependency snapshot: in the image store, or in the
// registry of copy snapshots.
func (r *Runner) SnapshotName() string { return "deps-" + r.ConfigHash() }

// registry is DataDir/snapshots.json: the copy snapshots' names → engine snapshot ids.
func (r *Runner) registryPath() string { return filepath.Join(r.o.DataDir, "snapshots.json") }

func (r *Runner) readRegistry() (map[string]string, error) {
	m := map[string]string{}
	b, err := os.ReadFile(r.registryPath())
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read %s: %w", r.registryPath(), err)
	}
	return m, nil
}

// LookupSnapshot returns the dependency snapshot, if it exists: the image
// deps-<configHash> in the image store, or the copy snapshot of that name in the
// registry.
func (r *Runner) LookupSnapshot(ctx context.Context) (SnapshotInfo, bool, error) {
	name := r.SnapshotName()
	if r.imageStore() != nil {
		return r.lookupImage(ctx, name)
	}
	m, err := r.readRegistry()
	if err != nil {
		return SnapshotInfo{}, false, err
	}
	id, ok := m[name]
	return SnapshotInfo{Name: name, ID: id, Reused: true}, ok, nil
}

// forgetSnapshot drops a registered copy snapshot the engine no longer has (an image
// the store lost has lost its name with it).
func (r *Runner) forgetSnapshot(name string) error {
	if r.imageStore() != nil {
		return nil
	}
	return r.locked("snapshots", func() error {
		m, err := r.readRegistry()
		if err != nil {
			return err
		}
		delete(m, name)
		b, _ := json.MarshalIndent(m, "", "  ")
		return atomicfile.WriteFile(r.registryPath(), b, 0o600)
	})
}

// EnsureSnapshot returns the snapshot deps-<configHash>, building it when it does not
// exist: a temporary sandbox (from Config.Image when the engine boots images) gets
// Deno and the package.json, runs `deno install` (reaching only the npm registry), is
// snapshotted and destroyed. Progress goes to Options.Progress. Concurrent callers
// (processes on the same DataDir included) build it once.
func (r *Runner) EnsureSnapshot(ctx context.Context) (SnapshotInfo, error) {
	if info, ok, err := r.LookupSnapshot(ctx); err != nil || ok {
		return info, err
	}
	var info SnapshotInfo
	err := r.locked("snapshots", func() error {
		var ok bool
		var err error
		if info, ok, err = r.LookupSnapshot(ctx); err != nil || ok {
			return err
		}
		start := time.Now()
		fmt.Fprintf(r.o.Progress, "building dependency snapshot %s\n", info.Name)
		if r.imageStore() != nil {
			info, err = r.buildImage(ctx, info.Name)
		} else {
			info, err = r.buildCopy(ctx, info.Name)
		}
		if err != nil {
			return fmt.Errorf("build snapshot %s: %w", r.SnapshotName(), err)
		}
		fmt.Fprintf(r.o.Progress, "snapshot %s = %s, built in %v\n", info.Name, info.ID, time.Since(start).Round(time.Millisecond))
		// The packages' own docs are searchable from the first session on.
		if err := r.indexPackageDocs(ctx, info); err != nil {
			fmt.Fprintf(r.o.Progress, "docs of the packages: %v\n", err)
		}
		return nil
	})
	return info, err
}

// buildCopy builds the dependency snapshot as the engine's copy snapshot and registers
// it in DataDir/snapshots.json.
func (r *Runner) buildCopy(ctx context.Context, name string) (SnapshotInfo, error) {
	spec := engine.Spec{Egress: true, EgressHosts: []string{registryHost}, Timeout: 30 * time.Minute,
		Labels: map[string]string{"coderun": "build"}}
	// The machine's CAs too (the sandbox sees the host's /etc/ssl): a TLS-inspecting
	// proxy on the way to the registry is common.
	id, err := r.buildSnapshot(ctx, name, spec, []string{"DENO_TLS_CA_STORE=mozilla,system"}, nil)
	if err != nil {
		return SnapshotInfo{}, err
	}
	m, err := r.readRegistry()
	if err != nil {
		return SnapshotInfo{}, err
	}
	m[name] = id
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := atomicfile.WriteFile(r.registryPath(), b, 0o600); err != nil {
		return SnapshotInfo{}, err
	}
	return SnapshotInfo{Name: name, ID: id}, nil
}

// packageJSON is the dependency directory's package.json.
func (r *Runner) packageJSON() []byte {
	deps := map[string]string{}
	for k, v := range runtimePackages {
		deps[k] = v
	}
	for _, d := range r.cfg.Dependencies {
		deps[d.Package] = d.Version
	}
	b, _ := json.MarshalIndent(map[string]any{"name": "coderun-deps", "private": true, "type": "module", "dependencies": deps}, "", "  ")
	return b
}

// sandboxFile is a file the build writes into its sandbox.
type sandboxFile struct {
	path string
	data []byte
	mode uint32
}

// buildSnapshot boots the build sandbox of spec, writes Deno, the package.json, the
// REPL server and extra files into it, runs `deno install` with env added, warms the
// REPL's code cache, keeps the packages' docs for the snapshot name, and returns the
// engine's Snapshot of it; the sandbox is terminated.
func (r *Runner) buildSnapshot(ctx context.Context, name string, spec engine.Spec, env []string, extra []sandboxFile) (string, error) {
	denoBin, err := r.hostDeno(ctx)
	if err != nil {
		return "", err
	}
	bin, err := os.ReadFile(denoBin)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(r.o.Progress, "creating the build sandbox\n")
	info, err := r.eng.Create(ctx, spec)
	if err != nil {
		return "", err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := r.eng.Terminate(tctx, info.ID); err != nil {
			r.log.Warn("terminate build sandbox", "sandbox", info.ID, "err", err)
		}
	}()
	files := append([]sandboxFile{{rules.CoderunDeno, bin, 0o755}, {path.Join(rules.CoderunDepsDir, "package.json"), r.packageJSON(), 0o644},
		{rules.CoderunREPLSource, replScript, 0o644}}, extra...)
	for _, f := range files {
		if err := r.eng.WriteFile(ctx, info.ID, f.path, f.data, f.mode); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(r.o.Progress, "deno install (%d packages)\n", len(r.cfg.Dependencies)+len(runtimePackages))
	env = append([]string{"DENO_DIR=" + rules.CoderunDenoDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}, env...)
	if err := r.buildStep(ctx, info.ID, env, rules.CoderunDeno, "install"); err != nil {
		return "", err
	}
	// One module instead of the packages' many: the REPL starts ~50-100 ms sooner.
	// (esbuild, which deno bundle fetches from the registry, stays out of the image.)
	fmt.Fprintf(r.o.Progress, "bundling the REPL server\n")
	if err := r.buildStep(ctx, info.ID, env, rules.CoderunDeno, "bundle", "--quiet", "--node-modules-dir=manual",
		"-o", rules.CoderunREPL, rules.CoderunREPLSource); err != nil {
		return "", err
	}
	if err := r.buildStep(ctx, info.ID, nil, "sh", "-c", `rm -rf "$0"/npm/*/@esbuild "$0"/npm/*/esbuild`, rules.CoderunDenoDir); err != nil {
		return "", err
	}
	// One run of the REPL fills Deno's code cache (in DENO_DIR, part of the snapshot),
	// so session REPLs start faster. The build's sandbox has no secrets, not even
	// their placeholders: nothing of them may land in the snapshot.
	fmt.Fprintf(r.o.Progress, "warming the REPL's code cache\n")
	pid, err := r.startREPL(ctx, info.ID, rules.CoderunDepsDir)
	if err != nil {
		return "", err
	}
	if res, _ := r.eval(ctx, sessionState{Sandbox: info.ID, Pid: pid}, "1 + 1"); !res.Success || string(res.Result) != "2" {
		return "", fmt.Errorf("the REPL does not work: %+v", res)
	}
	r.killREPL(ctx, sessionState{Sandbox: info.ID, Pid: pid})
	if err := r.eng.Remove(ctx, info.ID, rules.CoderunREPLLog); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	fmt.Fprintf(r.o.Progress, "reading the packages' docs\n")
	if docs, err := r.collectPackageDocs(ctx, info.ID); err != nil {
		// Docs are not worth a failed build; a later IndexDocs reads them again.
		fmt.Fprintf(r.o.Progress, "docs of the packages: %v\n", err)
	} else if err := r.savePackageDocs(name, docs); err != nil {
		return "", err
	}
	fmt.Fprintf(r.o.Progress, "snapshotting\n")
	return r.eng.Snapshot(ctx, info.ID)
}

// buildStep runs argv in the build sandbox's dependency directory; its output goes to
// Progress, and its tail into the error of a failure.
func (r *Runner) buildStep(ctx context.Context, sandbox string, env []string, argv ...string) error {
	var out bytes.Buffer
	w := io.MultiWriter(r.o.Progress, &out)
	code, err := r.eng.Exec(ctx, sandbox, engine.ExecRequest{Argv: argv, Cwd: rules.CoderunDepsDir, Env: env,
		Timeout: 15 * time.Minute, Stdout: w, Stderr: w})
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv[:2], " "), err)
	}
	if code != 0 {
		return fmt.Errorf("%s: exit code %d: %s", strings.Join(argv[:2], " "), code, tail(out.String(), 2000))
	}
	return nil
}

// hostDeno returns the host path of the native Deno binary of the npm package `deno`,
// installing it with npm into DataDir/npm/deno-<version> the first time.
func (r *Runner) hostDeno(ctx context.Context) (string, error) {
	plat := map[string]string{"amd64": "linux-x64-glibc", "arm64": "linux-arm64-glibc"}[runtime.GOARCH]
	if plat == "" {
		return "", fmt.Errorf("deno: no npm build for %s", runtime.GOARCH)
	}
	dir := filepath.Join(r.o.DataDir, "npm", "deno-"+r.o.DenoVersion)
	bin := filepath.Join(dir, "node_modules", "@deno", plat, "deno")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	fmt.Fprintf(r.o.Progress, "npm install deno@%s\n", r.o.DenoVersion)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private":true}`), 0o600); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, r.o.NPM, "install", "--no-audit", "--no-fund", "--no-save", "deno@"+r.o.DenoVersion)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("npm install deno@%s: %w: %s", r.o.DenoVersion, err, tail(string(out), 2000))
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("npm install deno@%s: no %s: %w", r.o.DenoVersion, bin, err)
	}
	return bin, nil
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
