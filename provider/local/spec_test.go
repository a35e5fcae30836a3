package local

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// TestSpecFromOptions: the options' image, runtime, limits and volumes go into every
// sandbox's engine.Spec.
func TestSpecFromOptions(t *testing.T) {
	o := Options{Image: "img", Runtime: "runc", Limits: engine.Limits{MemoryBytes: 1 << 29, Pids: 200, CPUMillis: 1500, DiskBytes: 1 << 31},
		Volumes: []engine.VolumeMount{{Name: "data", Target: "/data", ReadOnly: true}}}
	got := (&Provider{o: o}).spec()
	want := engine.Spec{Image: "img", Runtime: "runc", Limits: o.Limits, Volumes: o.Volumes}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec() (-want +got):\n%s", diff)
	}
}

func TestCheckSpec(t *testing.T) {
	all := engine.Capabilities{Images: true, Volumes: true, Limits: true, Runtimes: []string{"runc", "runsc"}}
	tests := []struct {
		name string
		caps engine.Capabilities
		spec engine.Spec
		want error
	}{
		{"nothing asked", engine.Capabilities{}, engine.Spec{}, nil},
		{"all offered", all, engine.Spec{Image: "i", Runtime: "runsc", Limits: engine.Limits{Pids: 1},
			Volumes: []engine.VolumeMount{{Name: "v", Target: "/v"}}}, nil},
		{"no images", engine.Capabilities{}, engine.Spec{Image: "i"}, engine.ErrUnsupported},
		{"unknown runtime", all, engine.Spec{Runtime: "kata"}, engine.ErrUnsupported},
		{"no runtimes", engine.Capabilities{}, engine.Spec{Runtime: "runc"}, engine.ErrUnsupported},
		{"no volumes", engine.Capabilities{}, engine.Spec{Volumes: []engine.VolumeMount{{Name: "v", Target: "/v"}}}, engine.ErrUnsupported},
		{"no limits", engine.Capabilities{}, engine.Spec{Limits: engine.Limits{MemoryBytes: 1}}, engine.ErrLimit},
	}
	for _, tt := range tests {
		err := checkSpec(tt.caps, tt.spec)
		if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: checkSpec = %v, want %v", tt.name, err, tt.want)
		}
	}
}
