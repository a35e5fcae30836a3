package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// Factory carries what commands need from the outside: the streams, the environment
// and the global flags. Each command is NewCmdX(f, runF): tests pass a runF that
// records the parsed options, or build a Factory with their own streams.
type Factory struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	provider   string
	dataDir    string
	unisolated bool
	json       bool
	verbose    bool
}

// newFactory is the Factory of one run of sandboxctl.
func newFactory(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) *Factory {
	return &Factory{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// exitError ends sandboxctl with a code and no message (exec passes its command's).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func knownNames[V any](m map[string]V) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func (f *Factory) logger() *slog.Logger {
	if !f.verbose {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(f.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// progress writes a progress line on stderr (never stdout: it is for results).
func (f *Factory) progress(format string, args ...any) {
	fmt.Fprintf(f.stderr, format+"\n", args...)
}

// openedBackend is a backend with its close.
type openedBackend struct{ *backend }

func (b openedBackend) close() {
	if b.Close != nil {
		_ = b.Close()
	}
}

// open opens the backend name ("" means --provider).
func (f *Factory) open(ctx context.Context, name string) (openedBackend, error) {
	return f.openWith(ctx, name, nil)
}

// openWith is open with the backend's options adjusted by set (a command's own, such
// as create's --llm-keys-in-sandbox); nil sets nothing.
func (f *Factory) openWith(ctx context.Context, name string, set func(*backendOptions)) (openedBackend, error) {
	if name == "" {
		name = f.provider
	}
	bo := backendOptions{DataDir: f.dataDir, Unisolated: f.unisolated, Getenv: f.getenv, Stderr: f.stderr, Logger: f.logger()}
	if set != nil {
		set(&bo)
	}
	b, err := openBackend(ctx, name, bo)
	if err != nil {
		return openedBackend{}, err
	}
	return openedBackend{b}, nil
}

// printJSON writes v as indented JSON.
func (f *Factory) printJSON(v any) error {
	enc := json.NewEncoder(f.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// withBackend is every command's open-call-print: it opens the backend of
// --provider, calls call with it, closes it, and prints the result on stdout, as
// JSON with --json, else with text (nil prints nothing).
func withBackend[T any](ctx context.Context, f *Factory, call func(context.Context, openedBackend) (T, error), text func(io.Writer, T) error) error {
	b, err := f.open(ctx, "")
	if err != nil {
		return err
	}
	defer b.close()
	v, err := call(ctx, b)
	if err != nil {
		return err
	}
	if f.json {
		return f.printJSON(v)
	}
	if text == nil {
		return nil
	}
	return text(f.stdout, v)
}
