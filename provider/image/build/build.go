// Package build builds an image definition (provider/image) into the local image store
// (provider/image/store), one image per step, each cached under the step's content key:
// a second build of the same definition does no work and returns the same id, and a
// changed step rebuilds only itself and the steps after it.
//
// Steps that only change the configuration (env, workdir, user) make no layer. Copy and
// binary steps write their files straight into a new layer folder. Run and apt steps
// need a sandbox: a Runner runs them on the image so far and returns what changed (see
// EngineRunner for the local engine).
package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/debian"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// RunRequest is a run or apt step to run on an image.
type RunRequest struct {
	// Parent is the image the step runs on (its layers and configuration).
	Parent engine.RootFS
	// Shell is the command, for sh -c.
	Shell string
	// Log receives the command's output.
	Log io.Writer
}

// Layer is what a Runner made: an overlayfs-form folder (whiteouts as 0/0 character
// devices), which stays the runner's (the store copies it), and how its owners map to
// the layer's ids.
type Layer struct {
	Dir string
	IDs store.IDMap
	// Skip leaves out what is not the step's (what the sandbox's engine made at boot).
	Skip store.SkipFunc
	// Done releases what the runner still holds (the build sandbox); called after the
	// layer is stored. Nil: nothing.
	Done func()
}

// Runner runs one step on a parent image in a build sandbox and returns its changes.
type Runner interface {
	Run(ctx context.Context, req RunRequest) (Layer, error)
}

// ErrNoRunner: the definition has run or apt steps and the build has no Runner.
var ErrNoRunner = errors.New("run and apt steps need a build sandbox (no runner)")

// Options configure Build.
type Options struct {
	// Store receives the images (required).
	Store *store.Store
	// Runner runs run and apt steps; nil fails them with ErrNoRunner.
	Runner Runner
	// Sources are the files of copy and binary steps.
	Sources image.Sources
	// Debian configures building a debian:<suite>[-slim] base the store lacks.
	Debian debian.Options
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// StepResult says what became of one step.
type StepResult struct {
	Step   string `json:"step"` // canonical form
	Key    string `json:"key"`
	ID     string `json:"id"`              // the image after the step
	Layer  string `json:"layer,omitempty"` // diff id of the layer it made
	Cached bool   `json:"cached"`          // found in the cache: no work done
	Took   string `json:"took,omitempty"`  // time spent (not cached)
	Base   bool   `json:"base,omitempty"`  // the FROM step
	Final  bool   `json:"final,omitempty"` // the image-level configuration (expose, cmd)
}

// Result is a finished build.
type Result struct {
	ID    string       `json:"id"`
	Name  string       `json:"name,omitempty"`
	Steps []StepResult `json:"steps"`
}

// Built counts the steps that did work (not cached).
func (r Result) Built() int {
	n := 0
	for _, s := range r.Steps {
		if !s.Cached {
			n++
		}
	}
	return n
}

// Build builds img and names the result img.Name (when set).
func Build(ctx context.Context, img image.Image, o Options) (Result, error) {
	if err := img.Validate(); err != nil {
		return Result{}, err
	}
	if o.Store == nil {
		return Result{}, errors.New("build: no store")
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	b := &builder{o: o, log: progress}
	return b.build(ctx, img)
}

type builder struct {
	o   Options
	log io.Writer
}

func (b *builder) build(ctx context.Context, img image.Image) (Result, error) {
	var res Result
	start := time.Now()
	base, cached, err := b.base(ctx, img.From)
	if err != nil {
		return Result{}, err
	}
	res.Steps = append(res.Steps, StepResult{Step: "FROM " + img.From, ID: base, Cached: cached, Base: true, Took: took(start, cached)})
	fmt.Fprintf(b.log, "[base] FROM %s: %s%s\n", img.From, short(base), note(cached, start))
	keys, err := img.Keys(base, b.o.Sources)
	if err != nil {
		return Result{}, err
	}
	cur := base
	for i, s := range img.Steps {
		r, err := b.step(ctx, cur, s, keys[i])
		if err != nil {
			return Result{}, fmt.Errorf("step %d (%s): %w", i+1, s.Canonical(), err)
		}
		fmt.Fprintf(b.log, "[%d/%d] %s: %s%s\n", i+1, len(img.Steps), firstLine(s.Canonical()), short(r.ID), stepNote(r))
		res.Steps = append(res.Steps, r)
		cur = r.ID
	}
	if len(img.Expose) > 0 || len(img.Cmd) > 0 {
		key, err := img.Key(base, b.o.Sources)
		if err != nil {
			return Result{}, err
		}
		r, err := b.cached(ctx, key, "CONFIG", func(start time.Time) (StepResult, error) {
			cfg, err := b.config(ctx, cur)
			if err != nil {
				return StepResult{}, err
			}
			cfg.Cmd = img.Cmd
			cfg.ExposedPorts = nil
			for _, p := range img.Expose {
				if cfg.ExposedPorts == nil {
					cfg.ExposedPorts = map[string]struct{}{}
				}
				cfg.ExposedPorts[strconv.Itoa(p)+"/tcp"] = struct{}{}
			}
			id, err := b.o.Store.NewImage(ctx, store.ImageSpec{Parent: cur, Config: cfg, CreatedBy: "CONFIG expose/cmd"})
			return StepResult{ID: id}, err
		})
		if err != nil {
			return Result{}, err
		}
		r.Final = true
		res.Steps = append(res.Steps, r)
		cur = r.ID
	}
	res.ID = cur
	if img.Name != "" {
		if err := b.o.Store.Tag(ctx, cur, img.Name); err != nil {
			return Result{}, err
		}
		res.Name = img.Name
	}
	fmt.Fprintf(b.log, "built %s (%d of %d steps did work) in %v\n", short(cur), res.Built(), len(res.Steps), time.Since(start).Round(time.Millisecond))
	return res, nil
}

// base finds the FROM image in the store, building a Debian base it lacks.
func (b *builder) base(ctx context.Context, ref string) (id string, cached bool, err error) {
	if in, err := b.o.Store.Get(ctx, ref); err == nil {
		return in.ID, true, nil
	}
	if _, _, ok := debian.ParseRef(ref); !ok {
		return "", false, fmt.Errorf("base %s is not in the image store: import it (sandboxctl image import) or use debian:<suite>[-slim]", ref)
	}
	fmt.Fprintf(b.log, "[base] building %s with mmdebstrap (about 20 s, once)\n", ref)
	id, err = debian.Build(ctx, b.o.Store, ref, b.o.Debian)
	return id, false, err
}

// cached returns the step's image from the cache, or makes it with do and records it.
func (b *builder) cached(ctx context.Context, key, canonical string, do func(start time.Time) (StepResult, error)) (StepResult, error) {
	if id, ok := b.o.Store.CacheGet(ctx, key); ok {
		return StepResult{Step: canonical, Key: key, ID: id, Cached: true}, nil
	}
	start := time.Now()
	r, err := do(start)
	if err != nil {
		return StepResult{}, err
	}
	r.Step, r.Key, r.Took = canonical, key, took(start, false)
	return r, b.o.Store.CachePut(key, r.ID)
}

func (b *builder) config(ctx context.Context, id string) (store.Config, error) {
	in, err := b.o.Store.Get(ctx, id)
	if err != nil {
		return store.Config{}, err
	}
	cfg := in.Config
	cfg.Env = slices.Clone(cfg.Env)
	return cfg, nil
}

// step makes (or finds) the image of one step on top of parent.
func (b *builder) step(ctx context.Context, parent string, s image.Step, key string) (StepResult, error) {
	return b.cached(ctx, key, s.Canonical(), func(time.Time) (StepResult, error) {
		cfg, err := b.config(ctx, parent)
		if err != nil {
			return StepResult{}, err
		}
		var layers []string
		switch s.Kind {
		case image.KindEnv:
			for _, e := range s.Env {
				cfg.Env = setEnv(cfg.Env, e.Key, e.Value)
			}
		case image.KindWorkDir:
			cfg.WorkingDir = s.Path
		case image.KindUser:
			cfg.User = s.User
		case image.KindCopy, image.KindBinary:
			diff, err := b.files(ctx, s)
			if err != nil {
				return StepResult{}, err
			}
			layers = []string{diff}
		case image.KindRun, image.KindApt:
			diff, err := b.run(ctx, parent, s)
			if err != nil {
				return StepResult{}, err
			}
			layers = []string{diff}
		}
		id, err := b.o.Store.NewImage(ctx, store.ImageSpec{Parent: parent, Layers: layers, Config: cfg, CreatedBy: s.Canonical()})
		r := StepResult{ID: id}
		if len(layers) > 0 {
			r.Layer = layers[0]
		}
		return r, err
	})
}

// run runs a run or apt step in a build sandbox and stores what it changed.
func (b *builder) run(ctx context.Context, parent string, s image.Step) (string, error) {
	if b.o.Runner == nil {
		return "", ErrNoRunner
	}
	fs, err := b.o.Store.ResolveImage(ctx, parent)
	if err != nil {
		return "", err
	}
	layer, err := b.o.Runner.Run(ctx, RunRequest{Parent: fs, Shell: s.Shell(), Log: b.log})
	if err != nil {
		return "", err
	}
	if layer.Done != nil {
		defer layer.Done()
	}
	return b.o.Store.CommitLayer(ctx, layer.Dir, store.CommitOptions{IDs: layer.IDs, Skip: layer.Skip})
}

// setEnv sets key in env (KEY=VALUE entries). Values are literal: the Dockerfile
// renders $ escaped, so neither expands variables.
func setEnv(env []string, key, value string) []string {
	for i, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			env[i] = key + "=" + value
			return env
		}
	}
	return append(env, key+"="+value)
}

func short(id string) string { return id[:min(12, len(id))] }

func firstLine(s string) string {
	if len(s) > 72 {
		return s[:69] + "..."
	}
	return s
}

func note(cached bool, start time.Time) string {
	if cached {
		return " (cached)"
	}
	return " (" + time.Since(start).Round(time.Millisecond).String() + ")"
}

func stepNote(r StepResult) string {
	if r.Cached {
		return " (cached)"
	}
	return " (" + r.Took + ")"
}

func took(start time.Time, cached bool) string {
	if cached {
		return ""
	}
	return time.Since(start).Round(time.Millisecond).String()
}
