package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// contractRoutes is every route of the contract (CONTRACT.md), and whether a
// caller needs the token for it. A route added to routes.go without a line
// here fails TestRoutesMatchContract, so nothing slips in unauthenticated.
var contractRoutes = []struct {
	method, path string
	public       bool
}{
	{"GET", "/api/health", true},
	{"GET", "/api/auth/check", false},
	{"GET", "/api/services", false},
	{"POST", "/api/services", false},
	{"GET", "/api/services/{name}", false},
	{"DELETE", "/api/services/{name}", false},
	{"POST", "/api/services/{name}/restart", false},
	{"GET", "/api/logs/{name}", false},
	{"GET", "/api/events", false},
	{"POST", "/api/expose", false},
	{"GET", "/api/expose", false},
	{"GET", "/api/git/repos", false},
	{"GET", "/api/git/status", false},
	{"GET", "/api/git/diff", false},
	{"GET", "/api/git/bundle", false},
	{"POST", "/api/git/bundle", false},
	{"GET", "/api/git/changeset", false},
	{"GET", "/api/ports", false},
	{"GET", "/api/terminal", false},
	{"GET", "/api/terminal/sessions", false},
	{"GET", "/api/debug/stats", false},
}

// TestRoutesMatchContract walks the router: the registered routes are
// exactly contractRoutes, and without a token only the public ones answer
// anything but 401.
func TestRoutesMatchContract(t *testing.T) {
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()

	var want, got []string
	for _, r := range contractRoutes {
		want = append(want, r.method+" "+r.path)
	}
	err = chi.Walk(s.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		got = append(got, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("registered routes differ from the contract (-want +got):\n%s", diff)
	}

	for _, r := range contractRoutes {
		path := strings.ReplaceAll(r.path, "{name}", "svc")
		resp, _ := do(t, r.method, ts.URL+path, "", "")
		want := http.StatusUnauthorized
		if r.public {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("%s %s without a token = %d, want %d", r.method, r.path, resp.StatusCode, want)
		}
	}
}
