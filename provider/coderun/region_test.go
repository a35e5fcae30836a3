package coderun

import (
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// regionalEngine is the real engine that also takes a region.
type regionalEngine struct {
	*local.Engine
	region string
}

func (e *regionalEngine) UseRegion(region string) error {
	e.region = region
	return nil
}

// The seed's config (provider = "deno", region = "ord") loads: the region reaches an
// engine that has regions, and is ignored with a warning by one that has none.
func TestRegion(t *testing.T) {
	c := testConfig(t, "provider = \"deno\"\nregion = \"ord\"\n")
	if c.Provider != "local" || c.Region != "ord" {
		t.Fatalf("Parse: provider %q region %q, want local and ord", c.Provider, c.Region)
	}
	_, progress := newRunner(t, c, Options{ReapEvery: -1})
	if want := `region = "ord" is ignored: the local engine has no regions`; !strings.Contains(progress.String(), want) {
		t.Errorf("progress = %q, want %q", progress.String(), want)
	}
	eng := &regionalEngine{Engine: needRuntime(t)}
	_, progress = newRunner(t, c, Options{Engine: eng, ReapEvery: -1})
	if eng.region != "ord" || strings.Contains(progress.String(), "ignored") {
		t.Errorf("regional engine got region %q, progress %q; want ord and no warning", eng.region, progress.String())
	}
}
