package modalserver

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsRow is one row of docs/modal.md's SDK table.
type docsRow struct {
	status string // served, refused or n/a
	// err is, for refused and for needsVolumes rows, the error text the SDK shows (a
	// part of it) when the method is refused.
	err string
	// needsVolumes marks a served row whose note says "refused with `…` when the
	// engine has no volumes": the method is served only on an engine with volumes.
	needsVolumes bool
}

// withoutVolumes is how a served row's note names the refusal on an engine without
// volumes.
var withoutVolumes = regexp.MustCompile("refused with `([^`]+)` when the engine has no volumes")

// expect is the row's status on an engine that has volumes or not: served or refused
// (or n/a).
func (r docsRow) expect(volumes bool) string {
	if r.needsVolumes && !volumes {
		return "refused"
	}
	return r.status
}

// docsTable reads the table between the sdk-table markers of docs/modal.md: rows
// "| `Class.method` | status | note |", the note of a refused row holding the error in
// backquotes, and the note of a row served only on an engine with volumes saying
// "refused with `error` when the engine has no volumes".
func docsTable(t testing.TB) map[string]docsRow {
	t.Helper()
	data, err := os.ReadFile("../../../docs/modal.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- sdk-table -->")
	body, _, ok2 := strings.Cut(rest, "<!-- /sdk-table -->")
	if !ok || !ok2 {
		t.Fatal("docs/modal.md has no <!-- sdk-table --> … <!-- /sdk-table --> section")
	}
	rows := map[string]docsRow{}
	for _, line := range strings.Split(body, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		method := strings.Trim(strings.TrimSpace(cells[1]), "`")
		r := docsRow{status: strings.TrimSpace(cells[2])}
		switch {
		case r.status == "refused":
			if _, e, ok := strings.Cut(cells[3], "`"); ok {
				r.err, _, _ = strings.Cut(e, "`")
			}
		case r.status == "served" && strings.Contains(cells[3], "when the engine has no volumes"):
			m := withoutVolumes.FindStringSubmatch(cells[3])
			if m == nil {
				t.Errorf("docs/modal.md: %s says when the engine has no volumes, but not \"refused with `error` when the engine has no volumes\"", method)
				continue
			}
			r.err, r.needsVolumes = m[1], true
		}
		if _, dup := rows[method]; dup {
			t.Errorf("docs/modal.md lists %s twice", method)
		}
		rows[method] = r
	}
	return rows
}

// TestDocsTable walks the installed SDK's classes (testdata/js/methods.mjs) and checks
// docs/modal.md's table against them: every method listed, no method that is not the
// SDK's, every status one of served/refused/n/a, and every refused row (and every row
// refused on an engine without volumes) with its error.
func TestDocsTable(t *testing.T) {
	dir := jsDir(t)
	node := exec.Command("node", "methods.mjs")
	node.Dir = dir
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node methods.mjs: %v", err)
	}
	methods := strings.Fields(string(out))
	if len(methods) < 100 {
		t.Fatalf("methods.mjs found %d methods: %q", len(methods), methods)
	}
	rows := docsTable(t)
	for _, m := range methods {
		if _, ok := rows[m]; !ok {
			t.Errorf("docs/modal.md does not list the SDK method %s", m)
		}
	}
	for m, r := range rows {
		if !slices.Contains(methods, m) {
			t.Errorf("docs/modal.md lists %s, which the SDK does not have", m)
		}
		switch {
		case r.status != "served" && r.status != "refused" && r.status != "n/a":
			t.Errorf("docs/modal.md: %s has status %q; want served, refused or n/a", m, r.status)
		case r.status == "refused" && r.err == "":
			t.Errorf("docs/modal.md: refused %s gives no error in backquotes", m)
		}
	}
}
