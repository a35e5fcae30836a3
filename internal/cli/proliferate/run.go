package proliferate

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Exit codes: the only place they are decided.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// usageError makes the command exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// interruptedError ends a command that Ctrl-C stopped; msg may be empty.
type interruptedError struct{ msg string }

func (e *interruptedError) Error() string { return e.msg }

// run is the whole program: parse args, run the command, map the outcome to an exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	return execute(ctx, newFactory(getenv, stdin, stdout, stderr), args)
}

func execute(ctx context.Context, f *Factory, args []string) int {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && f.sidecar != nil && ctx.Err() == nil {
		err = f.sidecar.explain(err)
	}
	return exitCode(f.IO.ErrOut, ctx, err)
}

// exitCode prints err and says how the process ends.
func exitCode(stderr io.Writer, ctx context.Context, err error) int {
	if err == nil {
		return exitOK
	}
	var ie *interruptedError
	if errors.As(err, &ie) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		if ie != nil && ie.msg != "" {
			fmt.Fprintf(stderr, "Error: %s\n", ie.msg)
		}
		return exitInterrupted
	}
	var he *hintedError
	if errors.As(err, &he) {
		fmt.Fprintln(stderr, he.hint)
	}
	fmt.Fprintf(stderr, "Error: %s\n", err.Error())
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// hintedError is an error whose message is the contract's (the sidecar's own
// "Unauthorized") and a hint for the human, printed on the line before it.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() }
func (e *hintedError) Unwrap() error { return e.err }
