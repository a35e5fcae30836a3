package gitbundle

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/gitexec"
	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
)

// typicalBundle is a receiver cloned at base and a bundle of an agent's
// session on top of it: 10 commits touching 300 source files (about 1 MiB
// of text, deltas against base included).
func typicalBundle(b *testing.B) (recv, bundle string) {
	b.Helper()
	send := b.TempDir()
	gittest.Git(b, send, "init", "-q", "-b", "main")
	write := func(round int) {
		for i := range 300 {
			line := fmt.Sprintf("func f%d() int { return %d } // round %d\n", i, i*round, round)
			if err := os.WriteFile(filepath.Join(send, fmt.Sprintf("f%03d.go", i)), []byte(strings.Repeat(line, 40)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		gittest.Git(b, send, "add", "-A")
		gittest.Git(b, send, "commit", "-q", "-m", fmt.Sprint("round ", round))
	}
	write(0)
	base := strings.TrimSpace(gittest.Git(b, send, "rev-parse", "HEAD"))
	recv = filepath.Join(b.TempDir(), "recv")
	gittest.Git(b, b.TempDir(), "clone", "-q", "--bare", send, recv)
	for round := 1; round <= 10; round++ {
		write(round)
	}
	bundle = filepath.Join(b.TempDir(), "b.bundle")
	gittest.Git(b, send, "bundle", "create", "-q", bundle, "main", "^"+base)
	return recv, bundle
}

// BenchmarkReceive takes a typical bundle in: ScanPack, index-pack --strict
// into a quarantine, Drop.
func BenchmarkReceive(b *testing.B) {
	recv, bundle := typicalBundle(b)
	git, err := gitexec.New(gitexec.Options{Environ: gittest.Env()})
	if err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(bundle)
	b.SetBytes(fi.Size())
	for b.Loop() {
		q, err := Receive(b.Context(), git, recv, bundle, Limits{MaxObjectBytes: 1 << 30, MaxInflatedBytes: 1 << 30, MaxObjects: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		q.Drop()
	}
}

// BenchmarkFetchWithoutFsck is what taking the same bundle in cost before:
// git fetch of the bundle (git 2.39 runs index-pack without --strict) into a
// fresh copy of the receiver each time (a fetch of objects already there
// would skip index-pack).
func BenchmarkFetchWithoutFsck(b *testing.B) {
	recv, bundle := typicalBundle(b)
	fi, _ := os.Stat(bundle)
	b.SetBytes(fi.Size())
	for b.Loop() {
		b.StopTimer()
		fresh := filepath.Join(b.TempDir(), "r")
		gittest.Git(b, b.TempDir(), "clone", "-q", "--bare", recv, fresh)
		b.StartTimer()
		gittest.Git(b, fresh, "-c", "transfer.fsckObjects=true", "fetch", "--quiet", "--no-write-fetch-head", bundle, "+refs/heads/main:refs/incoming")
	}
}

// BenchmarkScanPack is the Go pass over the same pack alone.
func BenchmarkScanPack(b *testing.B) {
	_, bundle := typicalBundle(b)
	data, err := os.ReadFile(bundle)
	if err != nil {
		b.Fatal(err)
	}
	h, err := Parse(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data) - h.Len))
	for b.Loop() {
		if _, err := ScanPack(bytes.NewReader(data[h.Len:]), 20, Limits{MaxObjectBytes: 1 << 30, MaxInflatedBytes: 1 << 30, MaxObjects: 1 << 20}); err != nil {
			b.Fatal(err)
		}
	}
}
