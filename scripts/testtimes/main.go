// Command testtimes reads the event stream of `go test -json` on stdin and writes what
// `go test` without -json would show: each package's result line, the full output of
// every test that failed (or never finished, as when a test binary panics or times
// out), and every build error. At the end it prints a table of the packages' test
// times, slowest first, and the slowest tests. It exits 1 when a package or build
// failed, or when the stream had no test result at all. .ci/run pipes its test phase
// through it:
//
//	go test -race -count=1 -json ./... | go run ./scripts/testtimes -trim "$(go list -m)/"
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, plus the build
// events of go test, which carry ImportPath instead of Package).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string
	FailedBuild string
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testtimes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trim := fs.String("trim", "", "prefix to cut from package paths in the tables (the module path and a slash)")
	top := fs.Int("tests", 15, "how many of the slowest tests to list")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	r := newReport()
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go vet's or the go command's own words): pass it on.
			fmt.Fprintf(stdout, "%s\n", line)
			continue
		}
		r.add(stdout, e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(stderr, "testtimes: read the go test -json stream: %v\n", err)
		return 1
	}
	r.flushUnfinished(stdout)
	r.table(stdout, *trim, *top)
	switch {
	case r.failed:
		return 1
	case len(r.done) == 0:
		fmt.Fprintln(stderr, "testtimes: the stream had no package result; did go test run?")
		return 1
	}
	return 0
}
