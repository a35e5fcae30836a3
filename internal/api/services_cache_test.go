package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
)

// plainServices hides ListVersion, so the server encodes the list on every request.
type plainServices struct{ Services }

// getList GETs /api/services from url and returns the raw body after checking
// status and Content-Length.
func getList(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/api/services", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/services = %d %s, want 200", resp.StatusCode, b)
	}
	if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(b)) {
		t.Errorf("GET /api/services Content-Length = %q, want %d", got, len(b))
	}
	return string(b)
}

// TestListServicesCacheFollowsEveryChange: the cached list answer changes with
// every change, made through this API or by another manager (process) sharing
// the state dir, and with the exposed port, and is byte-for-byte what
// encoding the list afresh gives.
func TestListServicesCacheFollowsEveryChange(t *testing.T) {
	stateDir, work := t.TempDir(), t.TempDir()
	newManager := func() *services.Manager {
		m, err := services.New(services.Config{StateDir: stateDir, WorkspaceDir: work, StopTimeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("services.New: %v", err)
		}
		return m
	}
	mine, other := newManager(), newManager()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	exp := &recordingExposer{}
	cached, err := New(Options{Token: testToken, Logger: log, Services: mine, Expose: exp})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(Options{Token: testToken, Logger: log, Services: plainServices{mine}, Expose: exp})
	if err != nil {
		t.Fatal(err)
	}
	cts, pts := httptest.NewServer(cached), httptest.NewServer(plain)
	t.Cleanup(func() {
		cts.Close()
		pts.Close()
		list := mine.List()
		for _, svc := range list {
			_ = mine.Stop(context.Background(), svc.Name)
		}
		mine.Close()
		other.Close()
	})

	check := func(step string, want func(apitype.ServicesResponse) bool) {
		t.Helper()
		got := getList(t, cts.URL)
		if again := getList(t, cts.URL); again != got {
			t.Errorf("%s: second GET = %s, want %s", step, again, got)
		}
		if fresh := getList(t, pts.URL); fresh != got {
			t.Errorf("%s: cached GET = %s, want what encoding afresh gives: %s", step, got, fresh)
		}
		var resp apitype.ServicesResponse
		if err := json.Unmarshal([]byte(got), &resp); err != nil {
			t.Fatalf("%s: decode %s: %v", step, got, err)
		}
		if !want(resp) {
			t.Errorf("%s: GET /api/services = %s", step, got)
		}
	}
	status := func(resp apitype.ServicesResponse, name string) string {
		for _, s := range resp.Services {
			if s.Name == name {
				return s.Status
			}
		}
		return ""
	}

	check("empty", func(r apitype.ServicesResponse) bool { return len(r.Services) == 0 && r.ExposedPort == nil })

	if _, err := other.Start(t.Context(), apitype.StartServiceRequest{Name: "theirs", Command: "sleep 600"}); err != nil {
		t.Fatal(err)
	}
	check("started by the other manager", func(r apitype.ServicesResponse) bool { return status(r, "theirs") == apitype.StatusRunning })

	if code, body := authed(t, "POST", cts.URL+"/api/services", `{"name":"mine","command":"sleep 600"}`); code != 200 {
		t.Fatalf("POST /api/services = %d %s, want 200", code, body)
	}
	check("started through the API", func(r apitype.ServicesResponse) bool {
		return len(r.Services) == 2 && status(r, "mine") == apitype.StatusRunning
	})

	if err := other.Stop(t.Context(), "theirs"); err != nil {
		t.Fatal(err)
	}
	check("stopped by the other manager", func(r apitype.ServicesResponse) bool { return status(r, "theirs") == apitype.StatusStopped })

	if err := exp.SetExposedPort(3000); err != nil {
		t.Fatal(err)
	}
	check("port exposed", func(r apitype.ServicesResponse) bool { return r.ExposedPort != nil && *r.ExposedPort == 3000 })
	if err := exp.SetExposedPort(3001); err != nil {
		t.Fatal(err)
	}
	check("another port exposed", func(r apitype.ServicesResponse) bool { return r.ExposedPort != nil && *r.ExposedPort == 3001 })
}
