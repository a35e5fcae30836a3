package logtail

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// BenchmarkFollowThroughput measures a follower reading a log that another
// goroutine appends to as fast as it can (64 KiB writes of text with
// multi-byte characters).
func BenchmarkFollowThroughput(b *testing.B) {
	d := newDir(b, Options{Dir: b.TempDir()})
	path := d.path("web", 0)
	appendFile(b, path, "")
	f, err := d.Open("web")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	block := bytes.Repeat([]byte("2024-01-01T00:00:00Z GET /api/ünïcode ✓ 200 1.2ms\n"), 64<<10/52)
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.SetBytes(int64(len(block)))
	b.ResetTimer()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range b.N {
			if _, err := w.Write(block); err != nil {
				b.Error(err)
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for got, want := 0, b.N*len(block); got < want; {
		s, err := f.Next(ctx)
		if err != nil {
			b.Fatalf("Next after %d of %d bytes: %v", got, want, err)
		}
		got += len(s)
	}
	wg.Wait()
}

// BenchmarkFollowLatency measures write-to-Next latency without HTTP: Next
// is already waiting (on the file-system watcher) when a line is appended, and
// the clock stops when it returns the line.
func BenchmarkFollowLatency(b *testing.B) {
	d := newDir(b, Options{Dir: b.TempDir()})
	path := d.path("web", 0)
	appendFile(b, path, "")
	f, err := d.Open("web")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	line := []byte("GET /api/health 200 0.1ms\n")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan int)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(got)
		for {
			s, err := f.Next(ctx)
			if err != nil {
				return
			}
			got <- len(s)
		}
	})
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := w.Write(line); err != nil {
			b.Fatal(err)
		}
		for n := 0; n < len(line); n += <-got {
		}
		lat = append(lat, time.Since(start))
	}
	cancel()
	wg.Wait()
	reportPercentiles(b, lat)
}
