package e2b

import (
	"context"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// envd connects to a sandbox (resuming it when paused) and returns its envd client.
func (p *Provider) envd(ctx context.Context, sandboxID string) (*Envd, error) {
	s, err := p.client.Connect(ctx, sandboxID, provider.SandboxTimeout(p.o.Getenv))
	if err != nil {
		return nil, err
	}
	return p.client.Envd(s), nil
}

// WriteEnvFile merges envVars into the env override file. It connects, so a paused
// sandbox is resumed.
func (p *Provider) WriteEnvFile(ctx context.Context, sandboxID string, envVars map[string]string) error {
	const op = provider.OpWriteEnvFile
	if err := p.ready(op); err != nil {
		return err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return p.fail(op, err)
	}
	file := provider.DefaultPaths().EnvOverrideFile()
	old, err := e.ReadFile(ctx, file)
	if err != nil && !IsNotFound(err) {
		return p.fail(op, err)
	}
	if err := e.WriteFile(ctx, file, provider.MergeEnvFile(old, envVars)); err != nil {
		return p.fail(op, err)
	}
	return nil
}

// ExecCommand runs argv without shell interpolation (each word escaped), under
// timeout(1), in cwd, with env.
func (p *Provider) ExecCommand(ctx context.Context, sandboxID string, argv []string, o provider.ExecOptions) (provider.ExecResult, error) {
	const op = provider.OpExecCommand
	if err := p.ready(op); err != nil {
		return provider.ExecResult{}, err
	}
	if len(argv) == 0 {
		return provider.ExecResult{}, provider.NewProviderError(provider.KindE2B, op, "argv is required", false, nil)
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return provider.ExecResult{}, p.fail(op, err)
	}
	env := map[string]string{}
	for _, kv := range o.Env {
		env[kv.Key] = kv.Value
	}
	r, err := e.Run(ctx, provider.BuildE2BExecCommand(argv, o.Cwd, timeout), RunOptions{Envs: env, Timeout: timeout + 5*time.Second})
	if err != nil {
		return provider.ExecResult{}, p.fail(op, err)
	}
	return provider.ExecResult{Stdout: provider.CapOutput(r.Stdout, 0), Stderr: provider.CapOutput(r.Stderr, 0), ExitCode: r.ExitCode}, nil
}

// ReadFiles returns every regular file under folder (recursively, by listing
// directories); a missing folder is none, unreadable files are skipped.
func (p *Provider) ReadFiles(ctx context.Context, sandboxID, folder string) ([]provider.FileContent, error) {
	const op = provider.OpReadFiles
	if err := p.ready(op); err != nil {
		return nil, err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(op, err)
	}
	folder = strings.TrimSuffix(folder, "/")
	if _, err := e.Stat(ctx, folder); err != nil {
		if IsNotFound(err) {
			return []provider.FileContent{}, nil
		}
		return nil, p.fail(op, err)
	}
	out := []provider.FileContent{}
	stack := []string{folder}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		entries, err := e.ListDir(ctx, dir)
		if err != nil {
			if IsNotFound(err) {
				continue
			}
			return nil, p.fail(op, err)
		}
		for _, en := range entries {
			switch en.Type {
			case e2bwire.FileTypeDirectory:
				stack = append(stack, en.Path)
			case e2bwire.FileTypeFile:
				data, err := e.ReadFile(ctx, en.Path)
				if err != nil {
					if ctx.Err() != nil {
						return nil, p.fail(op, ctx.Err())
					}
					continue
				}
				out = append(out, provider.FileContent{Path: strings.TrimPrefix(en.Path, folder+"/"), Data: data})
			}
		}
	}
	return out, nil
}

// TestServiceCommands runs each command to completion (or its timeout) with its
// output in a log file, and reports the capped output and exit code.
func (p *Provider) TestServiceCommands(ctx context.Context, sandboxID string, cmds []provider.ConfigurationServiceCommand, o provider.ServiceTestOptions) ([]provider.ServiceTestResult, error) {
	const op = provider.OpTestServiceCommands
	if err := p.ready(op); err != nil {
		return nil, err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(op, err)
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	runOne := func(ctx context.Context, cwd, command, logFile string) (provider.ExecResult, error) {
		r, err := e.Run(ctx, provider.BuildServiceTestCommand(cwd, command, logFile, 0), RunOptions{Timeout: timeout})
		return provider.ExecResult{Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode}, err
	}
	return provider.RunServiceTests(ctx, provider.DefaultPaths(), cmds, o.RunID, runOne), nil
}
