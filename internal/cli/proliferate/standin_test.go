package proliferate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// standIn is a sidecar that answers the service endpoints as the contract
// says, keeping services in memory. Commands whose text starts with "fail"
// end in error with exit code 1; "slow" ones become ready after readyAfter polls.
type standIn struct {
	t     testing.TB
	token string
	// old makes it answer like the old Node sidecar: no GET /api/services/{name},
	// no restart route (HTML 404s), no tail.
	old bool

	mu       sync.Mutex
	order    []string
	services map[string]*apitype.ServiceInfo
	polls    map[string]int
	exposed  *int
	logs     map[string][]string // the log, in chunks
	// script is what each log stream sends after its initial frame: appended
	// chunks, and "\x00error" for an error frame that ends the stream. A
	// stream whose script has no error stays open until the client leaves.
	script []string
	// scripted gets a value each time a stream has sent its script.
	scripted chan struct{}
	calls    []string
}

const readyAfter = 3

func newStandIn(t testing.TB, token string) *standIn {
	return &standIn{t: t, token: token, services: map[string]*apitype.ServiceInfo{}, polls: map[string]int{}, logs: map[string][]string{}, scripted: make(chan struct{}, 16)}
}

// serve starts it on loopback and returns its URL.
func (s *standIn) serve() string {
	srv := httptest.NewServer(s)
	s.t.Cleanup(srv.Close)
	return srv.URL
}

func (s *standIn) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *standIn) errorJSON(w http.ResponseWriter, status int, msg string) {
	s.writeJSON(w, status, apitype.ErrorResponse{Error: msg})
}

func (s *standIn) callLog() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls = append(s.calls, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		s.errorJSON(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	path := r.URL.Path
	switch {
	case path == "/api/services" && r.Method == http.MethodGet:
		s.mu.Lock()
		resp := apitype.ServicesResponse{Services: []apitype.ServiceInfo{}, ExposedPort: s.exposed}
		for _, n := range s.order {
			resp.Services = append(resp.Services, *s.services[n])
		}
		s.mu.Unlock()
		s.writeJSON(w, http.StatusOK, resp)
	case path == "/api/services" && r.Method == http.MethodPost:
		var req apitype.StartServiceRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			s.errorJSON(w, http.StatusBadRequest, "Invalid JSON body")
			return
		}
		if req.Name == "" || req.Command == "" {
			s.errorJSON(w, http.StatusBadRequest, "name and command are required")
			return
		}
		s.writeJSON(w, http.StatusOK, apitype.ServiceResponse{Service: s.start(req)})
	case path == "/api/expose" && r.Method == http.MethodPost:
		var body struct {
			Port any `json:"port"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		p, ok := body.Port.(float64)
		if !ok {
			s.errorJSON(w, http.StatusBadRequest, "port must be a number")
			return
		}
		port := int(p)
		s.mu.Lock()
		s.exposed = &port
		s.mu.Unlock()
		s.writeJSON(w, http.StatusOK, apitype.ExposeResponse{Success: true, ExposedPort: port})
	case strings.HasPrefix(path, "/api/services/"):
		s.service(w, r, strings.TrimPrefix(path, "/api/services/"))
	case strings.HasPrefix(path, "/api/logs/"):
		s.logsHandler(w, r, strings.TrimPrefix(path, "/api/logs/"))
	default:
		s.oldNotFound(w, r)
	}
}

// oldNotFound is Express's answer to an unknown route.
func (s *standIn) oldNotFound(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, "<!DOCTYPE html>\n<pre>Cannot %s %s</pre>\n", r.Method, r.URL.Path)
}

func (s *standIn) start(req apitype.StartServiceRequest) apitype.ServiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.services[req.Name]; !ok {
		s.order = append(s.order, req.Name)
	}
	info := &apitype.ServiceInfo{
		Name: req.Name, Command: req.Command, Cwd: req.Cwd, PID: 4242, Status: apitype.StatusRunning,
		StartedAt: time.Now().UnixMilli(), LogFile: "/tmp/proliferate/logs/" + req.Name + ".log",
		Restart: req.Restart, MaxRestarts: req.MaxRestarts, Readiness: req.Readiness, Env: req.Env,
		StopSignal: req.StopSignal, StopTimeoutMs: req.StopTimeoutMs,
	}
	if info.Cwd == "" {
		info.Cwd = "/home/user/workspace"
	}
	info.Ready = req.Readiness == nil
	s.polls[req.Name] = 0
	s.services[req.Name] = info
	s.logs[req.Name] = append(s.logs[req.Name], fmt.Sprintf("=== Service %q started ===\n", req.Name))
	return *info
}

func (s *standIn) service(w http.ResponseWriter, r *http.Request, rest string) {
	name, action, _ := strings.Cut(rest, "/")
	if s.old && (r.Method != http.MethodDelete || action != "") {
		s.oldNotFound(w, r)
		return
	}
	s.mu.Lock()
	info, ok := s.services[name]
	s.mu.Unlock()
	if !ok {
		s.errorJSON(w, http.StatusNotFound, fmt.Sprintf("Service %q not found", name))
		return
	}
	switch {
	case r.Method == http.MethodGet && action == "":
		s.mu.Lock()
		s.polls[name]++
		switch {
		case strings.HasPrefix(info.Command, "fail"):
			code := 1
			info.Status, info.ExitCode, info.Ready = apitype.StatusError, &code, false
			s.logs[name] = append(s.logs[name], "boom: listen EADDRINUSE\n")
		case s.polls[name] >= readyAfter:
			info.Ready = true
		}
		out := *info
		s.mu.Unlock()
		s.writeJSON(w, http.StatusOK, apitype.ServiceResponse{Service: out})
	case r.Method == http.MethodDelete && action == "":
		s.mu.Lock()
		info.Status, info.Ready = apitype.StatusStopped, false
		s.mu.Unlock()
		s.writeJSON(w, http.StatusOK, apitype.SuccessResponse{Success: true})
	case r.Method == http.MethodPost && action == "restart":
		out := s.start(apitype.StartServiceRequest{Name: name, Command: info.Command, Cwd: info.Cwd, Restart: info.Restart, Readiness: info.Readiness})
		s.writeJSON(w, http.StatusOK, apitype.ServiceResponse{Service: out})
	default:
		s.errorJSON(w, http.StatusMethodNotAllowed, "Method not allowed")
	}
}

func (s *standIn) logsHandler(w http.ResponseWriter, r *http.Request, name string) {
	s.mu.Lock()
	chunks, ok := s.logs[name]
	chunks = append([]string(nil), chunks...)
	s.mu.Unlock()
	if !ok {
		s.errorJSON(w, http.StatusNotFound, fmt.Sprintf("No logs found for service %q", name))
		return
	}
	if t := r.URL.Query().Get("tail"); t != "" {
		if s.old {
			s.errorJSON(w, http.StatusNotFound, "tail unsupported")
			return
		}
		n, _ := strconv.Atoi(t)
		lines := strings.Split(strings.TrimRight(strings.Join(chunks, ""), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		s.writeJSON(w, http.StatusOK, apitype.LogLinesResponse{Lines: lines})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	frame := func(f apitype.LogFrame) bool {
		b, _ := json.Marshal(f)
		_, err := fmt.Fprintf(w, "data: %s\n\n", b)
		return err == nil && rc.Flush() == nil
	}
	fmt.Fprint(w, ": keep-alive\n\n")
	if !frame(apitype.LogFrame{Type: "initial", Content: strings.Join(chunks, "")}) {
		return
	}
	s.mu.Lock()
	script := append([]string(nil), s.script...)
	s.mu.Unlock()
	for _, c := range script {
		if c == "\x00error" {
			frame(apitype.LogFrame{Type: "error", Message: "read log: input/output error"})
			return
		}
		if !frame(apitype.LogFrame{Type: "append", Content: c}) {
			return
		}
	}
	select {
	case s.scripted <- struct{}{}:
	default:
	}
	<-r.Context().Done()
}

// eventsHandler streams the given frames, then waits for the client to leave.
func eventsHandler(frames ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, f := range frames {
			fmt.Fprintf(w, "data: %s\n\n", f)
		}
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}
}
