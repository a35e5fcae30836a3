package coderun

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// p50 reports the median of durations as p50-ms.
func p50(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	if len(d) > 0 {
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	}
}

// BenchmarkFirstRunCode is the first run_code of a new session: a sandbox from the
// snapshot, the volume mounted, the REPL started, 1+1 evaluated.
func BenchmarkFirstRunCode(b *testing.B) {
	r, _ := newRunner(b, testConfig(b, ""), Options{ReapEvery: -1})
	ctx := context.Background()
	if _, err := r.EnsureSnapshot(ctx); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		s, err := r.Session(fmt.Sprintf("bench-first-%d-%d", time.Now().UnixNano(), i))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := s.RunCode(ctx, "1+1", "bench")
		lat = append(lat, time.Since(start))
		if err != nil || !res.Success {
			b.Fatal(res, err)
		}
		b.StopTimer()
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		dropVolume(b, r, s)
		b.StartTimer()
	}
	p50(b, lat)
}

// BenchmarkWarmRunCode is run_code of 1+1 in a session whose REPL is up.
func BenchmarkWarmRunCode(b *testing.B) {
	r, _ := newRunner(b, testConfig(b, ""), Options{ReapEvery: -1})
	s := session(b, r, "bench-warm")
	ctx := context.Background()
	if res, err := s.RunCode(ctx, "1+1", "warm up"); err != nil || !res.Success {
		b.Fatal(res, err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := s.RunCode(ctx, "1+1", "bench")
		lat = append(lat, time.Since(start))
		if err != nil || !res.Success {
			b.Fatal(res, err)
		}
	}
	p50(b, lat)
}

// BenchmarkSnapshotReuse is a restart: open a Runner on the data dir and find the
// dependency snapshot already built.
func BenchmarkSnapshotReuse(b *testing.B) {
	c := testConfig(b, "")
	r, _ := newRunner(b, c, Options{ReapEvery: -1})
	if _, err := r.EnsureSnapshot(context.Background()); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		r2, err := New(context.Background(), Options{Config: c, Engine: r.eng, DataDir: r.o.DataDir, ReapEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		info, err := r2.EnsureSnapshot(context.Background())
		lat = append(lat, time.Since(start))
		r2.Close()
		if err != nil || !info.Reused {
			b.Fatal(info, err)
		}
	}
	p50(b, lat)
}

// BenchmarkFirstRunCodeSpare is the first run_code of a new session when a spare
// sandbox is ready (Options.Spares): adopt it, register its volume, eval.
func BenchmarkFirstRunCodeSpare(b *testing.B) {
	r, _ := newRunner(b, testConfig(b, ""), Options{ReapEvery: -1, Spares: 1})
	ctx := context.Background()
	b.Cleanup(func() { r.DropSpares(context.Background()) })
	var lat []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		r.wg.Wait()
		if err := r.FillSpares(ctx); err != nil {
			b.Fatal(err)
		}
		i++
		s, err := r.Session(fmt.Sprintf("bench-spare-%d-%d", time.Now().UnixNano(), i))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		res, err := s.RunCode(ctx, "1+1", "bench")
		lat = append(lat, time.Since(start))
		if err != nil || !res.Success {
			b.Fatal(res, err)
		}
		b.StopTimer()
		r.wg.Wait()
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		dropVolume(b, r, s)
		b.StartTimer()
	}
	p50(b, lat)
}

// dropVolume deletes a closed session's volume and registry row, so a benchmark
// keeps no more than one volume mounted.
func dropVolume(b *testing.B, r *Runner, s *Session) {
	vol := s.Volume()
	if err := r.removeVolume(context.Background(), vol); err != nil {
		b.Fatal(err)
	}
	if err := r.store.DeleteVolume(context.Background(), vol); err != nil {
		b.Fatal(err)
	}
}
