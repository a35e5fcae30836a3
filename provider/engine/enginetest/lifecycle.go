package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// testCreate: a new sandbox is running, keeps its labels, and Get agrees.
func (s *suite) testCreate(t *testing.T) {
	labels := map[string]string{"suite": "enginetest", "case": uniq("c")}
	in := s.create(t, engine.Spec{Labels: labels})
	if in.ID == "" || in.State != engine.StateRunning {
		t.Errorf("Create = %+v, want an id and state running", in)
	}
	if !maps.Equal(in.Labels, labels) {
		t.Errorf("Create labels = %v, want %v", in.Labels, labels)
	}
	got, err := s.e.Get(ctx(t), in.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.ID != in.ID || got.State != engine.StateRunning || !maps.Equal(got.Labels, labels) {
		t.Errorf("Get = %+v, want %s running with labels %v", got, in.ID, labels)
	}
	if got.Isolated != s.e.Capabilities().Isolated {
		t.Errorf("Get.Isolated = %v, Capabilities.Isolated = %v", got.Isolated, s.e.Capabilities().Isolated)
	}
}

// testName: a name is unique among live sandboxes and free again after Terminate.
func (s *suite) testName(t *testing.T) {
	name := uniq("enginetest-")
	if !s.e.Capabilities().Names {
		_, err := s.e.Create(ctx(t), engine.Spec{Name: name})
		unsupported(t, "Create with a name", err)
		return
	}
	in := s.create(t, engine.Spec{Name: name})
	if _, err := s.e.Create(ctx(t), engine.Spec{Name: name}); !errors.Is(err, engine.ErrNameTaken) {
		t.Fatalf("second Create with name %q = %v, want ErrNameTaken", name, err)
	}
	if err := s.e.Terminate(ctx(t), in.ID); err != nil {
		t.Fatal(err)
	}
	again := s.create(t, engine.Spec{Name: name})
	if again.ID == in.ID {
		t.Errorf("Create after Terminate reused id %s", in.ID)
	}
}

// testImage: without Capabilities.Images, Spec.Image is refused; with it, an image the
// engine does not have is an error, never a sandbox of some other image.
func (s *suite) testImage(t *testing.T) {
	const ref = "enginetest.invalid/no-such-image:0"
	in, err := s.e.Create(ctx(t), engine.Spec{Image: ref})
	if err == nil {
		s.cleanup(t, in.ID)
	}
	if !s.e.Capabilities().Images {
		unsupported(t, "Create with an image", err)
		return
	}
	if err == nil {
		t.Errorf("Create with the unknown image %s = %+v, want an error", ref, in)
	}
}

// testSnapshot: a sandbox created from a snapshot has the files of the moment of the
// snapshot, and the original goes on independently.
func (s *suite) testSnapshot(t *testing.T) {
	in := s.create(t, engine.Spec{})
	if !s.e.Capabilities().Snapshot {
		_, err := s.e.Snapshot(ctx(t), in.ID)
		unsupported(t, "Snapshot", err)
		return
	}
	p := home("snap/state.txt")
	if err := s.e.WriteFile(ctx(t), in.ID, p, []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.sh(t, in.ID, "mkdir -p "+home("snap/made-by-exec")+" && echo exec > "+home("snap/made-by-exec/f"))
	snap, err := s.e.Snapshot(ctx(t), in.ID)
	if err != nil || snap == "" {
		t.Fatalf("Snapshot = %q, %v", snap, err)
	}
	if err := s.e.WriteFile(ctx(t), in.ID, p, []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	child := s.create(t, engine.Spec{Snapshot: snap})
	if child.ID == in.ID {
		t.Fatalf("the sandbox from the snapshot has the original's id %s", in.ID)
	}
	if data, err := s.e.ReadFile(ctx(t), child.ID, p); err != nil || string(data) != "before" {
		t.Errorf("file in the sandbox from the snapshot = %q, %v, want %q", data, err, "before")
	}
	if out := s.sh(t, child.ID, "cat "+home("snap/made-by-exec/f")); trim(out) != "exec" {
		t.Errorf("file written by an exec before the snapshot = %q, want exec", out)
	}
	if data, err := s.e.ReadFile(ctx(t), in.ID, p); err != nil || string(data) != "after" {
		t.Errorf("file in the original after the snapshot = %q, %v, want %q", data, err, "after")
	}
	if _, err := s.e.Create(ctx(t), engine.Spec{Snapshot: "no-such-snapshot"}); err == nil {
		t.Error("Create from an unknown snapshot succeeded")
	}
}

// testPause: a paused sandbox says so in Get and List, and resumes with its files and
// processes.
func (s *suite) testPause(t *testing.T) {
	in := s.create(t, engine.Spec{})
	if !s.e.Capabilities().Pause {
		unsupported(t, "Pause", s.e.Pause(ctx(t), in.ID))
		unsupported(t, "Resume", s.e.Resume(ctx(t), in.ID))
		return
	}
	if err := s.e.WriteFile(ctx(t), in.ID, home("pause.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.e.Pause(ctx(t), in.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if got, err := s.e.Get(ctx(t), in.ID); err != nil || got.State != engine.StatePaused {
		t.Errorf("Get after Pause = %+v, %v, want paused", got, err)
	}
	list, err := s.e.List(ctx(t))
	if got, ok := find(list, in.ID); err != nil || !ok || got.State != engine.StatePaused {
		t.Errorf("List after Pause: %+v (listed %v), %v, want it paused", got, ok, err)
	}
	if err := s.e.Resume(ctx(t), in.ID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got, err := s.e.Get(ctx(t), in.ID); err != nil || got.State != engine.StateRunning {
		t.Errorf("Get after Resume = %+v, %v, want running", got, err)
	}
	if out := s.sh(t, in.ID, "cat "+home("pause.txt")); out != "kept" {
		t.Errorf("file after Resume = %q, want kept", out)
	}
	if err := s.e.Pause(ctx(t), "no-such-sandbox-0"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Pause(unknown) = %v, want ErrNotFound", err)
	}
}

// testList: List has every live sandbox, with its state, and never a terminated one.
func (s *suite) testList(t *testing.T) {
	a := s.create(t, engine.Spec{})
	b := s.create(t, engine.Spec{})
	list, err := s.e.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if got, ok := find(list, id); !ok || got.State != engine.StateRunning {
			t.Errorf("List: %s is %+v (listed %v), want it running", id, got, ok)
		}
	}
	if err := s.e.Terminate(ctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	list, err = s.e.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := find(list, a.ID); ok {
		t.Errorf("List after Terminate still has %+v", got)
	}
	if _, ok := find(list, b.ID); !ok {
		t.Errorf("List after terminating another sandbox lost %s", b.ID)
	}
	// After Terminate, Get says the sandbox is gone: not found, or dead.
	if got, err := s.e.Get(ctx(t), a.ID); err == nil && got.State != engine.StateDead || err != nil && !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get after Terminate = %+v, %v, want ErrNotFound or dead", got, err)
	}
}

// testSandboxTimeout: a sandbox past its Spec.Timeout ends on its own: Get says dead
// (or not found), List never says running, and nothing runs in it any more.
func (s *suite) testSandboxTimeout(t *testing.T) {
	in := s.create(t, engine.Spec{Timeout: 2 * time.Second})
	c := ctx(t)
	err := eventually(c, time.Minute, func() error {
		got, err := s.e.Get(c, in.ID)
		if errors.Is(err, engine.ErrNotFound) || err == nil && got.State == engine.StateDead {
			return nil
		}
		return fmt.Errorf("Get = %+v, %v", got, err)
	})
	if err != nil {
		t.Fatalf("the sandbox did not end at its timeout: %v", err)
	}
	list, err := s.e.List(c)
	if got, ok := find(list, in.ID); err != nil || ok && got.State != engine.StateDead {
		t.Errorf("List after the sandbox's timeout: %+v, %v, want it absent or dead", got, err)
	}
	if code, err := s.e.Exec(c, in.ID, engine.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Exec in a sandbox past its timeout = %d, %v, want ErrNotFound", code, err)
	}
}

// testTerminate: Terminate twice is success, and nothing runs in a terminated sandbox.
func (s *suite) testTerminate(t *testing.T) {
	in := s.create(t, engine.Spec{})
	for i := range 2 {
		if err := s.e.Terminate(ctx(t), in.ID); err != nil {
			t.Errorf("Terminate #%d: %v", i+1, err)
		}
	}
	if code, err := s.e.Exec(ctx(t), in.ID, engine.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Exec after Terminate = %d, %v, want ErrNotFound", code, err)
	}
	if _, err := s.e.ReadFile(ctx(t), in.ID, "/etc/hostname"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("ReadFile after Terminate = %v, want ErrNotFound", err)
	}
}

// testUnknownID: every call on an id the engine never made is ErrNotFound, except
// Terminate, for which a gone sandbox is success.
func (s *suite) testUnknownID(t *testing.T) {
	const id = "sb-enginetest0unknown0"
	c := ctx(t)
	checks := map[string]error{}
	_, checks["Get"] = s.e.Get(c, id)
	_, checks["Exec"] = s.e.Exec(c, id, engine.ExecRequest{Argv: []string{"true"}})
	_, checks["ReadFile"] = s.e.ReadFile(c, id, "/etc/hostname")
	checks["WriteFile"] = s.e.WriteFile(c, id, home("x"), []byte("x"), 0o644)
	_, checks["ListFiles"] = s.e.ListFiles(c, id, "/")
	_, checks["Stat"] = s.e.Stat(c, id, "/")
	checks["MkdirAll"] = s.e.MkdirAll(c, id, home("d"))
	checks["Remove"] = s.e.Remove(c, id, home("d"))
	if s.e.Capabilities().Snapshot {
		_, checks["Snapshot"] = s.e.Snapshot(c, id)
	}
	if s.e.Capabilities().DialPort {
		_, checks["DialPort"] = s.e.DialPort(c, id, 8000)
	}
	for call, err := range checks {
		if !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("%s(unknown id) = %v, want ErrNotFound", call, err)
		}
	}
	if err := s.e.Terminate(c, id); err != nil {
		t.Errorf("Terminate(unknown id) = %v, want success", err)
	}
}

// testConcurrent: several creates, execs and terminates at once.
func (s *suite) testConcurrent(t *testing.T) {
	const n = 4
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i], errs[i] = s.createAndExec(ctx(t), i) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, id := range ids {
		if id != "" {
			s.cleanup(t, id)
		}
		if errs[i] != nil {
			t.Errorf("sandbox #%d: %v", i, errs[i])
		}
		if id != "" && seen[id] {
			t.Errorf("two concurrent creates returned the same id %s", id)
		}
		seen[id] = true
	}
	for _, id := range ids {
		wg.Go(func() {
			if err := s.e.Terminate(ctx(t), id); err != nil {
				t.Errorf("concurrent Terminate(%s): %v", id, err)
			}
		})
	}
	wg.Wait()
}

// createAndExec creates a sandbox whose Spec.Env has its index and runs two execs in
// it at once, which must each see their own input.
func (s *suite) createAndExec(ctx context.Context, i int) (string, error) {
	in, err := s.e.Create(ctx, engine.Spec{Env: []string{fmt.Sprintf("IDX=%d", i)}})
	if err != nil {
		return "", err
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for j := range 2 {
		wg.Go(func() {
			var out bytes.Buffer
			code, err := s.e.Exec(ctx, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", `echo "$IDX-$J"`},
				Env: []string{fmt.Sprintf("J=%d", j)}, Stdout: &out})
			if want := fmt.Sprintf("%d-%d\n", i, j); err != nil || code != 0 || out.String() != want {
				errs[j] = fmt.Errorf("exec %d = %d, %v, %q, want %q", j, code, err, out.String(), want)
			}
		})
	}
	wg.Wait()
	return in.ID, errors.Join(errs...)
}
