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
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
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
	// ID is the engine's snapshot id.
	ID string `json:"id"`
	// Reused is true when the snapshot already existed.
	Reused bool `json:"reused"`
}

// ConfigHash hashes the dependency set (sorted names and versions) with the runtime
// (Deno's version, the REPL server and its packages): a change to any rebuilds.
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
	h.Write(replScript)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// SnapshotName is the registry name of the dependency snapshot.
func (r *Runner) SnapshotName() string { return "deps-" + r.ConfigHash() }

// registry is DataDir/snapshots.json: snapshot name → engine snapshot id.
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

// LookupSnapshot returns the registered dependency snapshot, if any.
func (r *Runner) LookupSnapshot() (SnapshotInfo, bool, error) {
	m, err := r.readRegistry()
	if err != nil {
		return SnapshotInfo{}, false, err
	}
	name := r.SnapshotName()
	id, ok := m[name]
	return SnapshotInfo{Name: name, ID: id, Reused: true}, ok, nil
}

// forgetSnapshot drops a registered snapshot the engine no longer has.
func (r *Runner) forgetSnapshot(name string) error {
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

// EnsureSnapshot returns the snapshot deps-<configHash>, building it when it is not
// registered: a temporary sandbox gets Deno and the package.json, runs `deno install`
// (reaching only the npm registry), is snapshotted and destroyed. Progress goes to
// Options.Progress. Concurrent callers (processes included) build it once.
func (r *Runner) EnsureSnapshot(ctx context.Context) (SnapshotInfo, error) {
	if info, ok, err := r.LookupSnapshot(); err != nil || ok {
		return info, err
	}
	var info SnapshotInfo
	err := r.locked("snapshots", func() error {
		var ok bool
		var err error
		if info, ok, err = r.LookupSnapshot(); err != nil || ok {
			return err
		}
		start := time.Now()
		fmt.Fprintf(r.o.Progress, "building dependency snapshot %s\n", info.Name)
		id, err := r.buildSnapshot(ctx)
		if err != nil {
			return fmt.Errorf("build snapshot %s: %w", info.Name, err)
		}
		m, err := r.readRegistry()
		if err != nil {
			return err
		}
		m[info.Name] = id
		b, _ := json.MarshalIndent(m, "", "  ")
		if err := atomicfile.WriteFile(r.registryPath(), b, 0o600); err != nil {
			return err
		}
		info = SnapshotInfo{Name: info.Name, ID: id}
		fmt.Fprintf(r.o.Progress, "snapshot %s = %s, built in %v\n", info.Name, id, time.Since(start).Round(time.Millisecond))
		return nil
	})
	return info, err
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

func (r *Runner) buildSnapshot(ctx context.Context) (string, error) {
	denoBin, err := r.hostDeno(ctx)
	if err != nil {
		return "", err
	}
	bin, err := os.ReadFile(denoBin)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(r.o.Progress, "creating the build sandbox\n")
	info, err := r.eng.Create(ctx, engine.Spec{Egress: true, EgressHosts: []string{registryHost},
		Timeout: 30 * time.Minute, Labels: map[string]string{"coderun": "build"}})
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
	for _, f := range []struct {
		path string
		data []byte
		mode uint32
	}{{rules.CoderunDeno, bin, 0o755}, {path.Join(rules.CoderunDepsDir, "package.json"), r.packageJSON(), 0o644},
		{rules.CoderunREPL, replScript, 0o644}} {
		if err := r.eng.WriteFile(ctx, info.ID, f.path, f.data, f.mode); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(r.o.Progress, "deno install (%d packages)\n", len(r.cfg.Dependencies)+len(runtimePackages))
	var out bytes.Buffer
	w := io.MultiWriter(r.o.Progress, &out)
	code, err := r.eng.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{rules.CoderunDeno, "install"},
		Cwd: rules.CoderunDepsDir, Env: []string{"DENO_DIR=" + rules.CoderunDenoDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1",
			// The machine's CAs too: a TLS-inspecting proxy on the way to the registry is common.
			"DENO_TLS_CA_STORE=mozilla,system"},
		Timeout: 15 * time.Minute, Stdout: w, Stderr: w})
	if err != nil {
		return "", fmt.Errorf("deno install: %w", err)
	}
	if code != 0 {
		return "", fmt.Errorf("deno install: exit code %d: %s", code, tail(out.String(), 2000))
	}
	// One run of the REPL fills Deno's code cache (in DENO_DIR, part of the snapshot),
	// so session REPLs start faster. Without secrets: nothing of them may land in the
	// snapshot.
	fmt.Fprintf(r.o.Progress, "warming the REPL's code cache\n")
	pid, err := r.startREPL(ctx, info.ID, rules.CoderunDepsDir, nil)
	if err != nil {
		return "", err
	}
	if res, _ := r.eval(ctx, sessionState{Sandbox: info.ID, Pid: pid}, "1 + 1"); !res.Success || string(res.Result) != "2" {
		return "", fmt.Errorf("the REPL does not work: %+v", res)
	}
	r.killREPL(ctx, sessionState{Sandbox: info.ID, Pid: pid})
	fmt.Fprintf(r.o.Progress, "snapshotting\n")
	return r.eng.Snapshot(ctx, info.ID)
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
