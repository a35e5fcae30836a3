package bastion_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// unsharedVolumes is the local engine as an engine whose volumes are not shared
// live between running sandboxes (real Modal's): the controller gets a volume of
// its own in place of the one it shares with the agent.
type unsharedVolumes struct{ *local.Engine }

func (u unsharedVolumes) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	if spec.Labels[rules.LabelRole] == rules.RoleController {
		spec.Volumes = slices.Clone(spec.Volumes)
		for i := range spec.Volumes {
			spec.Volumes[i].Name += "-copy"
			if _, err := u.CreateVolume(ctx, engine.VolumeSpec{Name: spec.Volumes[i].Name}, true); err != nil {
				return engine.Info{}, err
			}
		}
	}
	return u.Engine.Create(ctx, spec)
}

// TestBastionRefusesUnsharedVolumes: on an engine whose volumes are not shared
// live, the controller never sees the agent's relay socket; the create is
// refused with ErrUnsupported, saying why and what to do, and leaves nothing.
func TestBastionRefusesUnsharedVolumes(t *testing.T) {
	requireEngine(t)
	eng := isolatedEngine(t)
	p, err := provider.New(unsharedVolumes{eng}, provider.Options{Kind: provider.KindLocal, SidecarTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.CreateBastion(t.Context(), provider.CreateOptions{SessionID: "bastion-" + randomHex(t, 4)},
		provider.BastionOptions{PlatformToken: "plat-" + randomHex(t, 8)})
	if !errors.Is(err, engine.ErrUnsupported) || !strings.Contains(fmt.Sprint(err), "does not share a volume live") ||
		!strings.Contains(fmt.Sprint(err), "create without the bastion option") {
		t.Fatalf("CreateBastion over unshared volumes = %v, want ErrUnsupported saying the volume is not shared live", err)
	}
	infos, err := eng.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		t.Errorf("sandbox %s (%s) left after the refused create", in.ID, in.State)
	}
}
