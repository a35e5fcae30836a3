package provider

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestCheckSpec(t *testing.T) {
	all := engine.Capabilities{Images: true, Volumes: true, Limits: true, Names: true, Runtimes: []string{"runc", "runsc"}}
	tests := []struct {
		name  string
		caps  engine.Capabilities
		binds bool
		spec  engine.Spec
		want  error
		words string // in the error
	}{
		{"nothing asked", engine.Capabilities{}, false, engine.Spec{}, nil, ""},
		{"all offered", all, true, engine.Spec{Image: "i", Runtime: "runsc", Limits: engine.Limits{Pids: 1}, Name: "n",
			Volumes: []engine.VolumeMount{{Name: "v", Target: "/v"}}, Mounts: []engine.Mount{{Source: "/s", Target: "/s"}}}, nil, ""},
		{"no images", engine.Capabilities{}, false, engine.Spec{Image: "i"}, engine.ErrUnsupported, `image "i"`},
		{"unknown runtime", all, false, engine.Spec{Runtime: "kata"}, engine.ErrUnsupported, "runc, runsc"},
		{"no runtimes", engine.Capabilities{}, false, engine.Spec{Runtime: "runc"}, engine.ErrUnsupported, "offers: none"},
		{"no volumes", engine.Capabilities{}, false, engine.Spec{Volumes: []engine.VolumeMount{{Name: "v", Target: "/v"}}}, engine.ErrUnsupported, `volume "v"`},
		{"no host mounts", all, false, engine.Spec{Mounts: []engine.Mount{{Source: "/s", Target: "/s"}}}, engine.ErrUnsupported, "/s"},
		{"no names", engine.Capabilities{}, false, engine.Spec{Name: "n"}, engine.ErrUnsupported, `name "n"`},
		{"no limits", engine.Capabilities{}, false, engine.Spec{Limits: engine.Limits{MemoryBytes: 1, Pids: 2}}, engine.ErrLimit, "memory, pids limit"},
	}
	for _, tt := range tests {
		err := CheckSpec(tt.caps, tt.binds, tt.spec)
		if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) || (err != nil && !strings.Contains(err.Error(), tt.words)) {
			t.Errorf("%s: CheckSpec = %v, want %v naming %q", tt.name, err, tt.want, tt.words)
		}
	}
}

// TestSpecTravelsWithTheCall: the caller's spec is kept, and the boot adds what it
// needs: its ports, egress, the session label and the sidecar token for the sandbox's
// own commands; a restore starts from the snapshot, not the image.
func TestSpecTravelsWithTheCall(t *testing.T) {
	p := &Provider{caps: engine.Capabilities{Isolated: true, Images: true, Limits: true, Volumes: true}, o: Options{Kind: KindLocal}}
	asked := engine.Spec{Image: "img", Limits: engine.Limits{MemoryBytes: 300 << 20, CPUMillis: 500},
		Volumes: []engine.VolumeMount{{Name: "v", Target: "/data"}}, Env: []string{"A=1"}, Labels: map[string]string{"owner": "me"}}
	opts := CreateOptions{SessionID: "s1", Spec: asked}
	got, err := p.spec(opts, "tok-1", "")
	if err != nil {
		t.Fatal(err)
	}
	want := asked
	want.Env = []string{"A=1", rules.EnvAuthToken + "=tok-1"}
	want.Labels = map[string]string{"owner": "me", "session": "s1"}
	want.Ports = []int{PortSandboxMCP, PortOpenCode, PortPreview}
	want.Egress = true
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if len(asked.Env) != 1 || asked.Labels["session"] != "" {
		t.Errorf("the caller's spec was changed: %+v", asked)
	}

	opts.SnapshotID = "snap-1"
	got, err = p.spec(opts, "tok-1", "")
	if err != nil || got.Image != "" || got.Snapshot != "snap-1" {
		t.Errorf("restore spec = image %q snapshot %q, %v; want the snapshot alone", got.Image, got.Snapshot, err)
	}

	// Without isolation: no ports or egress of its own, and the sidecar's URL for its
	// commands.
	p.caps.Isolated = false
	got, err = p.spec(CreateOptions{SessionID: "s1"}, "tok-1", "http://127.0.0.1:5")
	if err != nil || len(got.Ports) != 0 || got.Egress || !slices.Contains(got.Env, rules.EnvSidecarURL+"=http://127.0.0.1:5") {
		t.Errorf("unisolated spec = %+v, %v", got, err)
	}

	// An engine that tunnels sshd's port raw is asked for it too.
	p.caps = engine.Capabilities{Isolated: true, SSH: true}
	got, err = p.spec(CreateOptions{SessionID: "s1"}, "tok-1", "")
	if err != nil || !slices.Equal(got.Ports, []int{PortSandboxMCP, PortOpenCode, PortPreview, PortSSH}) {
		t.Errorf("spec on an engine with SSH: ports %v, %v; want the boot's and sshd's", got.Ports, err)
	}

	// What the engine cannot do is refused before anything is made.
	p.caps = engine.Capabilities{Isolated: true}
	if _, err := p.spec(CreateOptions{SessionID: "s1", Spec: engine.Spec{Limits: engine.Limits{MemoryBytes: 1}}}, "t", ""); !errors.Is(err, engine.ErrLimit) {
		t.Errorf("spec with a limit the engine lacks = %v, want ErrLimit", err)
	}
}

// TestResultPublishesTunnels: an isolated sandbox's result carries the URL of every
// boot port whether or not OpenCode and Caddy ran, and the SSH tunnel on an engine
// that makes one; without isolation, only what runs.
func TestResultPublishesTunnels(t *testing.T) {
	info := engine.Info{ID: "sb-1", Tunnels: []engine.Tunnel{{Port: PortSandboxMCP, Host: "127.0.0.1", HostPort: 1001},
		{Port: PortOpenCode, Host: "127.0.0.1", HostPort: 1002}, {Port: PortPreview, Host: "127.0.0.1", HostPort: 1003},
		{Port: PortSSH, Host: "127.0.0.1", HostPort: 1004}}}
	for _, tt := range []struct {
		name string
		caps engine.Capabilities
		want CreateResult
	}{
		{"isolated", engine.Capabilities{Isolated: true}, CreateResult{SandboxID: "sb-1", SandboxMCPURL: "http://127.0.0.1:1001",
			TunnelURL: "http://127.0.0.1:1002", PreviewURL: "http://127.0.0.1:1003"}},
		{"isolated with SSH", engine.Capabilities{Isolated: true, SSH: true}, CreateResult{SandboxID: "sb-1", SandboxMCPURL: "http://127.0.0.1:1001",
			TunnelURL: "http://127.0.0.1:1002", PreviewURL: "http://127.0.0.1:1003", SSHHost: "127.0.0.1", SSHPort: 1004}},
		{"unisolated", engine.Capabilities{}, CreateResult{SandboxID: "sb-1"}},
	} {
		p := &Provider{caps: tt.caps, o: Options{Kind: KindModal}, log: slog.New(slog.DiscardHandler)}
		if diff := cmp.Diff(tt.want, p.result(t.Context(), info, false, false)); diff != "" {
			t.Errorf("%s: result without OpenCode and Caddy (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(nil, Options{Kind: KindLocal}); err == nil {
		t.Error("New(nil engine) = nil error")
	}
}
