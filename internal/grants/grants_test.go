package grants

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNew(t *testing.T) {
	tests := []struct {
		o    Options
		want error
	}{
		{Options{SessionID: "s", Token: "t"}, ErrNotConfigured},
		{Options{GatewayURL: "http://g", Token: "t"}, ErrNotConfigured},
		{Options{GatewayURL: "http://g", SessionID: "s"}, ErrNoToken},
		{Options{GatewayURL: "http://g", SessionID: "s", Token: "t"}, nil},
	}
	for _, tc := range tests {
		if _, err := New(tc.o); !errors.Is(err, tc.want) {
			t.Errorf("New(%+v) = %v, want %v", tc.o, err, tc.want)
		}
	}
	c, _ := New(Options{GatewayURL: "http://g/", SessionID: "a/b", Token: "t"})
	if c.base != "http://g/proliferate/a%2Fb/actions" || c.timeout != DefaultTimeout || c.interval != DefaultPollInterval {
		t.Errorf("New defaults = %q %v %v", c.base, c.timeout, c.interval)
	}
}

func TestNewGrantRequest(t *testing.T) {
	three := 3
	tests := []struct {
		scope, maxCalls string
		want            GrantRequest
		err             string
	}{
		{"", "", GrantRequest{Integration: "i", Action: "a", Scope: "session"}, ""},
		{"org", "3", GrantRequest{Integration: "i", Action: "a", Scope: "org", MaxCalls: &three}, ""},
		{"team", "", GrantRequest{}, "--scope must be 'session' or 'org'"},
		{"session", "0", GrantRequest{}, "--max-calls must be a positive integer"},
		{"session", "-2", GrantRequest{}, "--max-calls must be a positive integer"},
		{"session", "2.5", GrantRequest{}, "--max-calls must be a positive integer"},
		{"session", "x", GrantRequest{}, "--max-calls must be a positive integer"},
	}
	for _, tc := range tests {
		got, err := NewGrantRequest("i", "a", tc.scope, tc.maxCalls)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if gotErr != tc.err || !cmp.Equal(got, tc.want) {
			t.Errorf("NewGrantRequest(%q, %q) = %+v, %q, want %+v, %q", tc.scope, tc.maxCalls, got, gotErr, tc.want, tc.err)
		}
	}
}

// recorder is a Waiter that keeps what it heard.
type recorder struct {
	mu    sync.Mutex
	id    string
	ticks []time.Duration
}

func (r *recorder) Start(id string) { r.id = id }
func (r *recorder) Tick(d time.Duration) {
	r.mu.Lock()
	r.ticks = append(r.ticks, d)
	r.mu.Unlock()
}

func TestRunPollsWithElapsedTime(t *testing.T) {
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"invocation":{"id":"inv-7","status":"pending"}}`)
			return
		}
		polls++
		if polls < 3 {
			io.WriteString(w, `{"invocation":{"id":"inv-7","status":"pending"}}`)
			return
		}
		io.WriteString(w, `{"invocation":{"id":"inv-7","status":"failed","error":{"message":"rate limited"}}}`)
	}))
	defer srv.Close()
	// A clock that moves 2 s each time it is read.
	var mu sync.Mutex
	now := time.Unix(0, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(2 * time.Second)
		return now
	}
	c, err := New(Options{GatewayURL: srv.URL, SessionID: "s", Token: "t", PollInterval: time.Millisecond, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	_, err = c.Run(t.Context(), "i", "a", nil, rec)
	var ge *Error
	if !errors.As(err, &ge) || ge.Message != "Action failed: rate limited" {
		t.Errorf("Run() = %v, want Action failed: rate limited", err)
	}
	if rec.id != "inv-7" || !cmp.Equal(rec.ticks, []time.Duration{2 * time.Second, 4 * time.Second}) {
		t.Errorf("waiter heard %q %v, want inv-7 and two ticks 2s apart", rec.id, rec.ticks)
	}
}
