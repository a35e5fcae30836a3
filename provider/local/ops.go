package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// ReadFiles returns every regular file under folder (absolute, or relative to the
// sandbox's home), with paths relative to folder. A missing folder is an empty
// result; unreadable files and symlinks are skipped.
func (p *Provider) ReadFiles(ctx context.Context, sandboxID, folder string) ([]provider.FileContent, error) {
	st, err := p.readState(sandboxID)
	if err != nil {
		return nil, provider.NewProviderError(provider.KindLocal, provider.OpReadFiles, fmt.Sprintf("sandbox %s not found", sandboxID), false, err)
	}
	folder = strings.TrimSuffix(folder, "/")
	if !filepath.IsAbs(folder) {
		folder = filepath.Join(st.Home, folder)
	}
	out := []provider.FileContent{}
	err = filepath.WalkDir(folder, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == folder && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return nil // unreadable entries are skipped
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(folder, path)
		out = append(out, provider.FileContent{Path: filepath.ToSlash(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, provider.FromError(err, provider.KindLocal, provider.OpReadFiles)
	}
	return out, nil
}

// TestServiceCommands runs each command in its repo directory with its output in a
// log file under the sandbox's tmp, at most o.TimeoutMs each (default 30s), and
// reports the capped output and exit code (124 on timeout).
func (p *Provider) TestServiceCommands(ctx context.Context, sandboxID string, cmds []provider.ConfigurationServiceCommand, o provider.ServiceTestOptions) ([]provider.ServiceTestResult, error) {
	st, err := p.readState(sandboxID)
	if err != nil {
		return nil, provider.NewProviderError(provider.KindLocal, provider.OpTestServiceCommands, fmt.Sprintf("sandbox %s not found", sandboxID), false, err)
	}
	paths := provider.RootedPaths(st.Home)
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	runID := o.RunID
	if runID == "" {
		runID = newID("")
	}
	out := make([]provider.ServiceTestResult, 0, len(cmds))
	for i, c := range cmds {
		cwd := provider.ServiceCwd(paths, c.WorkspacePath, c.Cwd)
		logFile := paths.ServiceTestLogFile(runID, i, c.Name)
		res := provider.ServiceTestResult{Name: c.Name, WorkspacePath: c.WorkspacePath, Cwd: cwd, LogFile: logFile}
		r, err := p.runCommand(ctx, sandboxID, paths, []string{"bash", "-c", provider.BuildServiceTestCommand(cwd, c.Command, logFile, 0)},
			st.Home, nil, timeout)
		if err != nil {
			res.Output = provider.RedactSecrets(err.Error())
			code := 1
			res.ExitCode = &code
		} else {
			res.Output = provider.CapOutput(r.Stdout+r.Stderr, 0)
			code := r.ExitCode
			res.ExitCode = &code
		}
		out = append(out, res)
	}
	return out, nil
}

// Executor is a provider.Executor over one local sandbox, for the helpers of package
// provider that drive a sandbox through commands and files (PullOnRestore).
func (p *Provider) Executor(sandboxID string) (provider.Executor, error) {
	st, err := p.readState(sandboxID)
	if err != nil {
		return nil, provider.NewProviderError(provider.KindLocal, provider.OpExecCommand, fmt.Sprintf("sandbox %s not found", sandboxID), false, err)
	}
	return &sandboxExecutor{p: p, id: sandboxID, paths: provider.RootedPaths(st.Home)}, nil
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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := e.p.runCommand(ctx, e.id, e.paths, []string{"bash", "-c", command}, e.paths.Home, nil, timeout)
	if err == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return r, fmt.Errorf("run command: timeout after %v", timeout)
	}
	return r, err
}

func (e *sandboxExecutor) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return os.ReadFile(path)
}

func (e *sandboxExecutor) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return writeFileAtomic(path, data, mode)
}
