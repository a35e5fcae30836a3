package enginetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// listenPort is the port inside the sandbox DialPort reaches.
const listenPort = 8000

// greeter is a TCP server in Perl (perl-base is in every Debian image) that answers
// every connection with a line, started detached so the exec returns.
const greeter = `nohup perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", ` +
	`LocalPort => %d, Listen => 5, ReuseAddr => 1) or die "listen: $!"; ` +
	`while ($c = $s->accept) { print $c "hello from %s\n"; close $c }' </dev/null >/dev/null 2>&1 &`

// testDialPort: DialPort reaches a server listening on the sandbox's own loopback.
func (s *suite) testDialPort(t *testing.T) {
	in := s.create(t, engine.Spec{Ports: []int{listenPort}})
	if !s.e.Capabilities().DialPort {
		_, err := s.e.DialPort(ctx(t), in.ID, listenPort)
		unsupported(t, "DialPort", err)
		return
	}
	s.sh(t, in.ID, fmt.Sprintf(greeter, listenPort, in.ID))
	c := ctx(t)
	want := "hello from " + in.ID
	err := eventually(c, 30*time.Second, func() error {
		conn, err := s.e.DialPort(c, in.ID, listenPort)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if line != want+"\n" {
			return fmt.Errorf("read %q, %v, want %q", line, err, want)
		}
		return nil
	})
	if err != nil {
		t.Errorf("DialPort to the sandbox's server: %v", err)
	}
}

// testVolumes: a volume is shared by the sandboxes that mount it (read-only where
// asked), outlives them, and cannot be removed while one uses it.
func (s *suite) testVolumes(t *testing.T) {
	vols, ok := s.e.(engine.Volumes)
	if !s.e.Capabilities().Volumes {
		if ok {
			t.Logf("the engine implements engine.Volumes without Capabilities.Volumes")
		}
		_, err := s.e.Create(ctx(t), engine.Spec{Volumes: []engine.VolumeMount{{Name: "v", Target: "/mnt/v"}}})
		unsupported(t, "Create with a volume", err)
		return
	}
	if !ok {
		t.Fatal("Capabilities.Volumes is set, but the engine does not implement engine.Volumes")
	}
	c := ctx(t)
	name := uniq("etvol")
	v, err := vols.CreateVolume(c, engine.VolumeSpec{Name: name, Labels: map[string]string{"k": "v"}}, false)
	if err != nil || v.Name != name {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	t.Cleanup(func() {
		// After the sandboxes' cleanups (registered later, run earlier); a volume the
		// test removed already is ErrNotFound.
		c, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := vols.RemoveVolume(c, name); err != nil && !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("RemoveVolume(%s) at cleanup: %v", name, err)
		}
	})
	if _, err := vols.CreateVolume(c, engine.VolumeSpec{Name: name}, false); err == nil {
		t.Error("CreateVolume of an existing name succeeded")
	}
	if again, err := vols.CreateVolume(c, engine.VolumeSpec{Name: name}, true); err != nil || again.Name != name {
		t.Errorf("CreateVolume(ifMissing) of an existing name = %+v, %v", again, err)
	}
	const target = "/mnt/shared"
	rw := s.create(t, engine.Spec{Volumes: []engine.VolumeMount{{Name: name, Target: target}}})
	ro, readOnly := s.createReadOnly(t, engine.Spec{Volumes: []engine.VolumeMount{{Name: name, Target: target, ReadOnly: true}}})
	s.sh(t, rw.ID, "echo shared > "+target+"/f")
	if out := s.sh(t, ro.ID, "cat "+target+"/f"); out != "shared\n" {
		t.Errorf("the other sandbox reads %q from the volume", out)
	}
	if code, _, _, err := s.run(t, ro.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "echo x > " + target + "/g"}}); readOnly && (err != nil || code == 0) {
		t.Errorf("write to a read-only mount = %d, %v, want a failure", code, err)
	}
	if got, err := vols.GetVolume(c, name); err != nil || !slices.Contains(got.UsedBy, rw.ID) || !slices.Contains(got.UsedBy, ro.ID) {
		t.Errorf("GetVolume = %+v, %v, want it used by %s and %s", got, err, rw.ID, ro.ID)
	}
	if err := vols.RemoveVolume(c, name); !errors.Is(err, engine.ErrInUse) {
		t.Errorf("RemoveVolume in use = %v, want ErrInUse", err)
	}
	for _, id := range []string{rw.ID, ro.ID} {
		if err := s.e.Terminate(c, id); err != nil {
			t.Fatal(err)
		}
	}
	later := s.create(t, engine.Spec{Volumes: []engine.VolumeMount{{Name: name, Target: target}}})
	if out := s.sh(t, later.ID, "cat "+target+"/f"); out != "shared\n" {
		t.Errorf("a later sandbox reads %q from the volume", out)
	}
	if err := s.e.Terminate(c, later.ID); err != nil {
		t.Fatal(err)
	}
	list, err := vols.ListVolumes(c)
	if err != nil || !slices.ContainsFunc(list, func(v engine.VolumeInfo) bool { return v.Name == name }) {
		t.Errorf("ListVolumes = %+v, %v, want %s", list, err, name)
	}
	if err := vols.RemoveVolume(c, name); err != nil {
		t.Fatalf("RemoveVolume: %v", err)
	}
	if _, err := vols.GetVolume(c, name); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("GetVolume after RemoveVolume = %v, want ErrNotFound", err)
	}
}

// createReadOnly creates spec, whose volumes are read-only; an engine that refuses
// read-only mounts with ErrUnsupported (E2B has none) gets them read-write instead,
// and readOnly is false.
func (s *suite) createReadOnly(t *testing.T, spec engine.Spec) (in engine.Info, readOnly bool) {
	t.Helper()
	in, err := s.e.Create(ctx(t), spec)
	if err == nil {
		s.cleanup(t, in.ID)
		return in, true
	}
	if !errors.Is(err, engine.ErrUnsupported) {
		t.Fatalf("Create(%+v): %v", spec, err)
	}
	t.Logf("read-only volume mounts are refused: %v", err)
	for i := range spec.Volumes {
		spec.Volumes[i].ReadOnly = false
	}
	return s.create(t, spec), false
}
