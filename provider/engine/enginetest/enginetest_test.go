package enginetest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/enginetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

func TestMain(m *testing.M) {
	local.MaybeRunInit()
	goleak.VerifyTestMain(m)
}

// faultEnv names the fault TestFaulty's engine has (set by TestContractChecksCanFail).
const faultEnv = "_ENGINETEST_FAULT"

// faulty is the local engine with one breach of the contract.
type faulty struct {
	*local.Engine
	fault string

	mu   sync.Mutex
	gone map[string]bool // terminated ids
}

func (f *faulty) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	switch f.fault {
	case "labels":
		spec.Labels = nil
	case "snapshot":
		spec.Snapshot = ""
	}
	return f.Engine.Create(ctx, spec)
}

func (f *faulty) Get(ctx context.Context, id string) (engine.Info, error) {
	in, err := f.Engine.Get(ctx, id)
	if f.fault == "notfound" && errors.Is(err, engine.ErrNotFound) {
		return in, errors.New(err.Error())
	}
	return in, err
}

func (f *faulty) List(ctx context.Context) ([]engine.Info, error) {
	list, err := f.Engine.List(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.gone {
		if f.fault == "list" {
			list = append(list, engine.Info{ID: id, State: engine.StateRunning})
		}
	}
	return list, err
}

func (f *faulty) Exec(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	switch f.fault {
	case "env":
		req.Env = nil
	case "stdin":
		req.Stdin = nil
	case "tty":
		req.TTY = false
	case "nokill":
		// The command runs on after the call returns.
		done := make(chan struct{})
		var code int
		var err error
		go func() {
			defer close(done)
			code, err = f.Engine.Exec(context.WithoutCancel(ctx), id, req)
		}()
		select {
		case <-done:
			return code, err
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	code, err := f.Engine.Exec(ctx, id, req)
	if f.fault == "timeout" && errors.Is(err, engine.ErrTimeout) {
		return 137, nil
	}
	return code, err
}

func (f *faulty) ReadFile(ctx context.Context, id, p string) ([]byte, error) {
	data, err := f.Engine.ReadFile(ctx, id, p)
	if f.fault == "fileerrors" && err != nil {
		err = errors.New(err.Error())
	}
	return data, err
}

func (f *faulty) RemoveVolume(ctx context.Context, name string) error {
	if f.fault == "inuse" {
		return nil
	}
	return f.Engine.RemoveVolume(ctx, name)
}

func (f *faulty) Pause(ctx context.Context, id string) error {
	if f.fault == "pause" {
		return nil
	}
	return f.Engine.Pause(ctx, id)
}

func (f *faulty) Terminate(ctx context.Context, id string) error {
	f.mu.Lock()
	again := f.gone[id]
	f.gone[id] = true
	f.mu.Unlock()
	if f.fault == "terminate" && again {
		return fmt.Errorf("sandbox %s: %w", id, engine.ErrNotFound)
	}
	return f.Engine.Terminate(ctx, id)
}

func newLocal(t *testing.T) *local.Engine {
	e, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir()})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A faulty engine may leave sandboxes or volumes behind (a volume stays
	// loop-mounted until removed): remove them on the real engine.
	t.Cleanup(func() {
		ctx := context.Background()
		infos, _ := e.List(ctx)
		for _, in := range infos {
			if err := e.Terminate(ctx, in.ID); err != nil {
				t.Errorf("terminate %s: %v", in.ID, err)
			}
		}
		vols, _ := e.ListVolumes(ctx)
		for _, v := range vols {
			if err := e.RemoveVolume(ctx, v.Name); err != nil {
				t.Errorf("remove volume %s: %v", v.Name, err)
			}
		}
		e.Close()
	})
	return e
}

// TestFaulty runs the suite on a faulty engine; only TestContractChecksCanFail runs it.
func TestFaulty(t *testing.T) {
	fault := os.Getenv(faultEnv)
	if fault == "" {
		t.Skip("run by TestContractChecksCanFail")
	}
	e := newLocal(t)
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		return &faulty{Engine: e, fault: fault, gone: map[string]bool{}}
	})
}

// TestContractChecksCanFail: each breach of the contract fails the subtest that checks it
// (the suite runs in a child process, on an engine with that one fault).
func TestContractChecksCanFail(t *testing.T) {
	newLocal(t) // skips where the local engine cannot run
	for _, tt := range []struct{ fault, subtest, says string }{
		{"labels", "Create", "labels"},
		{"snapshot", "Snapshot", "from the snapshot"},
		{"notfound", "UnknownID", "Get(unknown id)"},
		{"list", "List", "List after Terminate"},
		{"env", "Exec", "env:"},
		{"stdin", "Exec", "stdin and stderr"},
		{"timeout", "ExecTimeout", "want 124, ErrTimeout"},
		{"fileerrors", "FileErrors", "ReadFile(missing path)"},
		{"pause", "Pause", "Get after Pause"},
		{"terminate", "Terminate", "Terminate #2"},
		{"tty", "TTY", "want /dev/pts/N"},
		{"nokill", "ExecCancel", "went on running"},
		{"inuse", "Volumes", "want ErrInUse"},
	} {
		t.Run(tt.fault, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestFaulty$/^"+tt.subtest+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), faultEnv+"="+tt.fault)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("the suite on an engine with fault %q: %v (want a failure)\n%s", tt.fault, err, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestFaulty/"+tt.subtest) || !strings.Contains(string(out), tt.says) {
				t.Errorf("fault %q: want subtest %s to fail saying %q; output:\n%s", tt.fault, tt.subtest, tt.says, out)
			}
		})
	}
}
