package store_test

import (
	"os"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// BenchmarkPull pulls a 3-layer, 24 MB image from a registry on loopback into a new
// store each time (download, digest checks, unpacking).
func BenchmarkPull(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("unpacking layers with their owners needs root")
	}
	ref := imagetest.Registry(b, "bench/img:1", 8<<20, 3)
	b.SetBytes(3 * 8 << 20)
	for b.Loop() {
		b.StopTimer()
		s, err := store.Open(store.Options{Dir: b.TempDir(), GCGrace: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Pull(b.Context(), ref, store.PullOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
