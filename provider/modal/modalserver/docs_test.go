package modalserver

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// docsRow is one row of docs/modal.md's SDK table.
type docsRow struct {
	status string // served, refused or n/a
	err    string // for refused: the error text the SDK shows (a part of it)
}

// docsTable reads the table between the sdk-table markers of docs/modal.md: rows
// "| `Class.method` | status | note |", the note of a refused row holding the error in
// backquotes.
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
		if r.status == "refused" {
			if _, e, ok := strings.Cut(cells[3], "`"); ok {
				r.err, _, _ = strings.Cut(e, "`")
			}
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
// SDK's, every status one of served/refused/n/a, and every refused row with its error.
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
