package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report follows the packages of one `go test -json` stream.
type report struct {
	open   map[string]*pkgState
	order  []string // packages in the order their first event came
	done   []pkgResult
	tests  []testTime // every top-level test that ended, of every package
	failed bool
	first  time.Time
	last   time.Time
}

// pkgState is what a package has said until its result.
type pkgState struct {
	lines  []outLine
	result map[string]string // test (or subtest) -> pass, fail or skip
}

type outLine struct{ test, text string }

// pkgResult is a package's line in the table.
type pkgResult struct {
	pkg     string
	action  string // pass or fail
	elapsed float64
	slowest testTime
}

type testTime struct {
	pkg, test string
	elapsed   float64
}

func newReport() *report { return &report{open: map[string]*pkgState{}} }

// add takes one event; a package's output is written when its result comes.
func (r *report) add(w io.Writer, e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(w, e.Output)
		return
	case "build-fail":
		r.failed = true
		return
	}
	if !e.Time.IsZero() {
		if r.first.IsZero() || e.Time.Before(r.first) {
			r.first = e.Time
		}
		if e.Time.After(r.last) {
			r.last = e.Time
		}
	}
	p := r.open[e.Package]
	if p == nil {
		p = &pkgState{result: map[string]string{}}
		r.open[e.Package] = p
		r.order = append(r.order, e.Package)
	}
	switch e.Action {
	case "output":
		p.lines = append(p.lines, outLine{e.Test, e.Output})
	case "pass", "fail", "skip":
		if e.Test != "" {
			p.result[e.Test] = e.Action
			if !strings.Contains(e.Test, "/") && e.Action != "skip" {
				r.tests = append(r.tests, testTime{e.Package, e.Test, e.Elapsed})
			}
			return
		}
		r.finish(w, e, p)
	}
}

// finish writes a package's output as go test would without -json: for a failed
// package everything but the output of tests that passed or were skipped; for
// another, only what the package itself printed (its result line, TestMain's words).
func (r *report) finish(w io.Writer, e event, p *pkgState) {
	delete(r.open, e.Package)
	failed := e.Action == "fail"
	for _, l := range p.lines {
		if framing(l.text) || (!failed && (l.test != "" || l.text == "PASS\n")) {
			continue
		}
		if res := p.result[l.test]; l.test != "" && (res == "pass" || res == "skip") {
			continue
		}
		fmt.Fprint(w, l.text)
	}
	if failed {
		r.failed = true
	}
	if e.Action == "skip" {
		return // no test files, or no tests to run
	}
	res := pkgResult{pkg: e.Package, action: e.Action, elapsed: e.Elapsed}
	for _, t := range r.tests {
		if t.pkg == e.Package && t.elapsed >= res.slowest.elapsed {
			res.slowest = t
		}
	}
	r.done = append(r.done, res)
}

// framing is a line test2json's verbose mode adds that go test without -v does not
// show; "=== RUN" stays, as the header of a failed test's output.
func framing(s string) bool {
	for _, p := range []string{"=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// flushUnfinished writes, as failed, the packages that had no result when the stream
// ended (go test was killed, say).
func (r *report) flushUnfinished(w io.Writer) {
	for _, name := range r.order {
		p, ok := r.open[name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "--- %s: no result before the stream ended; its output so far:\n", name)
		r.finish(w, event{Package: name, Action: "fail"}, p)
		r.done[len(r.done)-1].action = "none"
	}
}

// table writes the packages' test times and the slowest tests, slowest first.
func (r *report) table(w io.Writer, trim string, top int) {
	if len(r.done) == 0 {
		return
	}
	slices.SortStableFunc(r.done, func(a, b pkgResult) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintln(w, "--- test time per package (each test binary's run), slowest first")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var sum float64
	for _, p := range r.done {
		sum += p.elapsed
		fmt.Fprintf(tw, "%7.1fs  %-4s  %s", p.elapsed, status(p.action), strings.TrimPrefix(p.pkg, trim))
		if p.slowest.test != "" {
			fmt.Fprintf(tw, "\t%s %.1fs", p.slowest.test, p.slowest.elapsed)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d packages, %.1fs of test time in %.1fs from the first event to the last\n",
		len(r.done), sum, r.last.Sub(r.first).Seconds())
	if top <= 0 || len(r.tests) == 0 {
		return
	}
	slices.SortStableFunc(r.tests, func(a, b testTime) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintf(w, "--- the %d slowest tests\n", min(top, len(r.tests)))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range r.tests[:min(top, len(r.tests))] {
		fmt.Fprintf(tw, "%7.1fs\t%s\t%s\n", t.elapsed, strings.TrimPrefix(t.pkg, trim), t.test)
	}
	tw.Flush()
}

func status(action string) string {
	switch action {
	case "pass":
		return "ok"
	case "fail":
		return "FAIL"
	}
	return "none" // no result: the stream ended first
}
