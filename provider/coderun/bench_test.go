package coderun

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// p50 reports the median of durations as p50-ms.
func p50(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	if len(d) > 0 {
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	}
}

// benchRunner is newRunner of the snapshot kind: "image" (skipped without the image
// store) or "copy".
func benchRunner(b *testing.B, kind string, c Config, o Options) *Runner {
	if kind == "copy" {
		r, _ := newCopyRunner(b, c, o)
		return r
	}
	if needRuntime(b); fixtureImages == nil {
		b.Skip("no image store here (root and mmdebstrap)")
	}
	r, _ := newRunner(b, c, o)
	return r
}

var snapshotKinds = []string{"image", "copy"}

// BenchmarkFirstRunCode is the first run_code of a new session: a sandbox from the
// snapshot (an image, or a copy), the volume mounted, the REPL started, 1+1 evaluated.
func BenchmarkFirstRunCode(b *testing.B) {
	for _, kind := range snapshotKinds {
		b.Run(kind, func(b *testing.B) { benchFirstRunCode(b, kind) })
	}
}

func benchFirstRunCode(b *testing.B, kind string) {
	r := benchRunner(b, kind, testConfig(b, ""), Options{ReapEvery: -1})
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
// dependency snapshot already built (in the image store, or the copy registry).
func BenchmarkSnapshotReuse(b *testing.B) {
	for _, kind := range snapshotKinds {
		b.Run(kind, func(b *testing.B) { benchSnapshotReuse(b, kind) })
	}
}

func benchSnapshotReuse(b *testing.B, kind string) {
	c := testConfig(b, "")
	r := benchRunner(b, kind, c, Options{ReapEvery: -1})
	if _, err := r.EnsureSnapshot(context.Background()); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		r2, err := New(context.Background(), Options{Config: c, Engine: r.eng, Images: r.o.Images, DataDir: r.o.DataDir, ReapEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		info, err := r2.EnsureSnapshot(context.Background())
		lat = append(lat, time.Since(start))
		r2.Close()
		if err != nil || !info.Reused || info.Image != (kind == "image") {
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

// BenchmarkBootPhases splits the first run_code's sandbox work into its phases, each
// reported as a p50: the volume (create and register), the sandbox from the snapshot
// (an image: its layers mounted; a copy: the snapshot's files copied), the REPL's start
// and the first eval.
func BenchmarkBootPhases(b *testing.B) {
	for _, kind := range snapshotKinds {
		b.Run(kind, func(b *testing.B) { benchBootPhases(b, kind) })
	}
}

func benchBootPhases(b *testing.B, kind string) {
	r := benchRunner(b, kind, testConfig(b, ""), Options{ReapEvery: -1})
	ctx := context.Background()
	snap, err := r.EnsureSnapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var vol, create, repl, eval []time.Duration
	i := 0
	for b.Loop() {
		i++
		name := fmt.Sprintf("coderun-phases-%d", i)
		t0 := time.Now()
		spec, err := r.sandboxSpec(ctx, snap, name, "bench-phases")
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		info, err := r.eng.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		pid, err := r.startREPL(ctx, info.ID, rules.CoderunWorkspace)
		if err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		res, _ := r.eval(ctx, sessionState{Sandbox: info.ID, Pid: pid}, "1+1")
		t4 := time.Now()
		if !res.Success {
			b.Fatal(res)
		}
		vol, create, repl, eval = append(vol, t1.Sub(t0)), append(create, t2.Sub(t1)), append(repl, t3.Sub(t2)), append(eval, t4.Sub(t3))
		b.StopTimer()
		if err := r.eng.Terminate(ctx, info.ID); err != nil {
			b.Fatal(err)
		}
		if err := r.removeVolume(ctx, name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	for _, m := range []struct {
		unit string
		d    []time.Duration
	}{{"volume-ms", vol}, {"create-ms", create}, {"repl-ms", repl}, {"eval-ms", eval}} {
		slices.Sort(m.d)
		b.ReportMetric(float64(m.d[len(m.d)/2].Microseconds())/1000, m.unit)
	}
}

// BenchmarkRunCodeDuringReap is run_code of 1+1 in a warm session while the reaper
// terminates 20 idle sessions' sandboxes: p50-ms over the calls made during the reap,
// reap-ms the reap itself.
func BenchmarkRunCodeDuringReap(b *testing.B) {
	clock := &testClock{now: time.Now()}
	r, _ := newRunner(b, testConfig(b, ""), Options{ReapEvery: -1, Now: clock.Now})
	ctx := context.Background()
	warm := session(b, r, "bench-reap-warm")
	if res, err := warm.RunCode(ctx, "1+1", "warm up"); err != nil || !res.Success {
		b.Fatal(res, err)
	}
	var lat, reaps []time.Duration
	for b.Loop() {
		b.StopTimer()
		for i := range 20 {
			s := session(b, r, fmt.Sprintf("bench-reap-%d", i))
			if err := s.Start(ctx); err != nil {
				b.Fatal(err)
			}
		}
		now := clock.Add(10 * time.Minute)
		if res, err := warm.RunCode(ctx, "1+1", "bench"); err != nil || !res.Success {
			b.Fatal(res, err)
		}
		b.StartTimer()
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			ids, err := r.ReapIdle(ctx, now)
			if err == nil && len(ids) != 20 {
				err = fmt.Errorf("reaped %d sessions, want 20", len(ids))
			}
			done <- err
		}()
		for reaping := true; reaping; {
			t0 := time.Now()
			res, err := warm.RunCode(ctx, "1+1", "bench")
			d := time.Since(t0)
			if err != nil || !res.Success {
				b.Fatal(res, err)
			}
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
				reaps = append(reaps, time.Since(start))
				reaping = false
			default:
			}
			lat = append(lat, d)
		}
	}
	p50(b, lat)
	slices.Sort(reaps)
	b.ReportMetric(float64(reaps[len(reaps)/2].Milliseconds()), "reap-ms")
	b.ReportMetric(float64(len(lat))/float64(len(reaps)), "calls/reap")
}
