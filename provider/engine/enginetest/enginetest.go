// Package enginetest is the contract suite every engine.Engine passes: the local
// engine, and the Modal and E2B adapters over their local servers (which serve their
// protocols on the local engine, so the servers are tested through the same contract).
// A provider's test calls Run with a constructor; what an engine cannot do, it declares
// in its Capabilities, and the suite then checks that it refuses it with
// engine.ErrUnsupported instead of pretending. Test code only: it imports testing.
package enginetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// opTimeout bounds every subtest's calls, so a hung engine fails instead of hanging.
const opTimeout = 2 * time.Minute

// Run runs the contract against the engine newEngine returns (once, shared by the
// subtests, which run one after another). Every sandbox the suite creates is terminated
// when its subtest ends; the engine's Close is the caller's.
func Run(t *testing.T, newEngine func(t *testing.T) engine.Engine) {
	t.Helper()
	s := &suite{e: newEngine(t)}
	for _, c := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"Create", s.testCreate},
		{"Name", s.testName},
		{"Exec", s.testExec},
		{"ExecTimeout", s.testExecTimeout},
		{"ExecCancel", s.testExecCancel},
		{"TTY", s.testTTY},
		{"Files", s.testFiles},
		{"FileErrors", s.testFileErrors},
		{"Image", s.testImage},
		{"Snapshot", s.testSnapshot},
		{"Pause", s.testPause},
		{"List", s.testList},
		{"SandboxTimeout", s.testSandboxTimeout},
		{"DialPort", s.testDialPort},
		{"Volumes", s.testVolumes},
		{"Terminate", s.testTerminate},
		{"UnknownID", s.testUnknownID},
		{"Concurrent", s.testConcurrent},
	} {
		t.Run(c.name, c.f)
	}
}

type suite struct{ e engine.Engine }

// ctx is a context of t bounded by opTimeout.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return c
}

// uniq is a name no other run uses.
func uniq(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// home is a path under the sandbox user's home, which every engine lets the sandbox
// and the file calls write, and which a snapshot keeps.
func home(rel string) string { return rules.HomeDir + "/" + rel }

// create creates a sandbox that is terminated at the end of t.
func (s *suite) create(t *testing.T, spec engine.Spec) engine.Info {
	t.Helper()
	in, err := s.e.Create(ctx(t), spec)
	if err != nil {
		t.Fatalf("Create(%+v): %v", spec, err)
	}
	s.cleanup(t, in.ID)
	return in
}

// cleanup terminates id at the end of t.
func (s *suite) cleanup(t *testing.T, id string) {
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := s.e.Terminate(c, id); err != nil {
			t.Errorf("Terminate(%s) at cleanup: %v", id, err)
		}
	})
}

// run execs argv (stdin, if any, from in) and returns its exit code and output.
func (s *suite) run(t *testing.T, id string, req engine.ExecRequest) (code int, stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	req.Stdout, req.Stderr = &o, &e
	code, err = s.e.Exec(ctx(t), id, req)
	return code, o.String(), e.String(), err
}

// sh runs a shell script and fails t unless it exits 0; it returns the output.
func (s *suite) sh(t *testing.T, id, script string) string {
	t.Helper()
	code, out, errOut, err := s.run(t, id, engine.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil || code != 0 {
		t.Fatalf("sh -c %q = %d, %v (stdout %q, stderr %q)", script, code, err, out, errOut)
	}
	return out
}

// unsupported checks that a call the engine's Capabilities leave out is refused with
// engine.ErrUnsupported.
func unsupported(t *testing.T, call string, err error) {
	t.Helper()
	if !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("%s on an engine without the capability = %v, want ErrUnsupported", call, err)
	}
}

// find returns the entry of list with id.
func find(list []engine.Info, id string) (engine.Info, bool) {
	for _, in := range list {
		if in.ID == id {
			return in, true
		}
	}
	return engine.Info{}, false
}

// eventually polls f every 100ms until it returns nil or d passes; it returns f's last
// error.
func eventually(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// trim is s without surrounding white space (terminals add \r).
func trim(s string) string { return strings.TrimSpace(s) }
