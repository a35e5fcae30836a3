package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// ReadFiles returns every regular file under folder (absolute inside the sandbox, or
// relative to its home), with paths relative to folder. A missing folder is an empty
// result; unreadable files and symlinks are skipped.
func (p *Provider) ReadFiles(ctx context.Context, sandboxID, folder string) ([]provider.FileContent, error) {
	st, ok := p.alive(ctx, sandboxID)
	if !ok {
		return nil, provider.NewProviderError(provider.KindLocal, provider.OpReadFiles, fmt.Sprintf("sandbox %s not found", sandboxID), false, nil)
	}
	folder = strings.TrimSuffix(folder, "/")
	if !path.IsAbs(folder) {
		folder = path.Join(st.Paths.Home, folder)
	}
	out := []provider.FileContent{}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		entries, err := p.eng.ListFiles(ctx, sandboxID, dir)
		if err != nil {
			if dir == folder && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return nil // unreadable entries are skipped
		}
		for _, e := range entries {
			mode := fs.FileMode(e.Mode)
			switch {
			case e.IsDir:
				if err := walk(path.Join(dir, e.Name), path.Join(rel, e.Name)); err != nil {
					return err
				}
			case mode.IsRegular():
				data, err := p.eng.ReadFile(ctx, sandboxID, path.Join(dir, e.Name))
				if err != nil {
					continue
				}
				out = append(out, provider.FileContent{Path: path.Join(rel, e.Name), Data: data})
			}
		}
		return nil
	}
	if err := walk(folder, ""); err != nil {
		return nil, provider.FromError(err, provider.KindLocal, provider.OpReadFiles)
	}
	return out, nil
}

// TestServiceCommands runs each command in its repo directory with its output in a
// log file under the sandbox's tmp, at most o.TimeoutMs each (default 30s), and
// reports the capped output and exit code (124 on timeout).
func (p *Provider) TestServiceCommands(ctx context.Context, sandboxID string, cmds []provider.ConfigurationServiceCommand, o provider.ServiceTestOptions) ([]provider.ServiceTestResult, error) {
	st, ok := p.alive(ctx, sandboxID)
	if !ok {
		return nil, provider.NewProviderError(provider.KindLocal, provider.OpTestServiceCommands, fmt.Sprintf("sandbox %s not found", sandboxID), false, nil)
	}
	paths := st.Paths
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	runID := o.RunID
	if runID == "" {
		runID = newID("")
	}
	runOne := func(ctx context.Context, cwd, command, logFile string) (provider.ExecResult, error) {
		return p.runCommand(ctx, sandboxID, paths, []string{"bash", "-c", provider.BuildServiceTestCommand(cwd, command, logFile, 0)},
			paths.Home, nil, timeout)
	}
	return provider.RunServiceTests(ctx, paths, cmds, runID, runOne), nil
}

// Executor is a provider.Executor over one local sandbox, for the helpers of package
// provider that drive a sandbox through commands and files (PullOnRestore). Paths
// are as the sandbox sees them (Boot.Paths).
func (p *Provider) Executor(sandboxID string) (provider.Executor, error) {
	st, ok := p.alive(context.Background(), sandboxID)
	if !ok {
		return nil, provider.NewProviderError(provider.KindLocal, provider.OpExecCommand, fmt.Sprintf("sandbox %s not found", sandboxID), false, nil)
	}
	return &sandboxExecutor{p: p, id: sandboxID, paths: st.Paths}, nil
}

type sandboxExecutor struct {
	p     *Provider
	id    string
	paths provider.Paths
}

func (e *sandboxExecutor) Run(ctx context.Context, command string, timeout time.Duration) (provider.ExecResult, error) {
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	r, timedOut, err := e.p.runCommandT(ctx, e.id, []string{"bash", "-c", command}, e.paths.Home, nil, timeout)
	if err == nil && timedOut {
		return r, fmt.Errorf("run command: timeout after %v", timeout)
	}
	return r, err
}

func (e *sandboxExecutor) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return e.p.eng.ReadFile(ctx, e.id, path)
}

func (e *sandboxExecutor) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return e.p.eng.WriteFile(ctx, e.id, path, data, uint32(mode.Perm()))
}
