package main

import "github.com/proliferate-ai/sandbox-mcp/provider/progress"

// reporter shows a long command's progress on stderr: a bar on a terminal,
// plain lines otherwise. The caller ends it with Done before printing results.
func (f *Factory) reporter() *progress.Reporter {
	return progress.New(f.stderr, progress.Options{Terminal: progress.IsTerminal(f.stderr)})
}
