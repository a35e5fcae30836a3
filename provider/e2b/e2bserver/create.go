package e2bserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
)

// timeoutSeconds reads a request's timeout (seconds) with E2B's default of 15.
func timeoutSeconds(v *int) (time.Duration, error) {
	if v == nil {
		return 15 * time.Second, nil
	}
	if *v < 0 || *v > 86400*30 {
		return 0, errBadRequest("timeout must be between 0 and %d seconds", 86400*30)
	}
	return time.Duration(*v) * time.Second, nil
}

type newSandboxRequest struct {
	TemplateID string `json:"templateID"`
	Timeout    *int   `json:"timeout"`
	AutoPause  bool   `json:"autoPause"`
	// Secure false (explicitly) makes envd answer without an access token, as E2B does;
	// absent means secured here, the safer default for a server on a shared machine.
	// v2 has no such field: a v2 sandbox is always secured.
	Secure        *bool             `json:"secure"`
	AllowInternet *bool             `json:"allow_internet_access"`
	Metadata      map[string]string `json:"metadata"`
	EnvVars       map[string]string `json:"envVars"`
	v2Fields
}

// v2Fields are NewSandboxV2's fields beyond v1's. What this server cannot honour is
// refused by name (refuseV2), never ignored.
type v2Fields struct {
	// AutoPauseMemory false makes the timeout's pause filesystem-only: snapshot and
	// stop, which this server does anyway on an engine without pause.
	AutoPauseMemory *bool `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network      *e2bwire.NetworkConfig `json:"network"`
	IAM          json.RawMessage        `json:"iam"`
	MCP          json.RawMessage        `json:"mcp"`
	VolumeMounts []e2bwire.VolumeMount  `json:"volumeMounts"`
}

// refuseV2 names the first requested feature this server lacks; volumeMounts are
// served when the engine has volumes.
func refuseV2(f v2Fields, volumes bool) error {
	lacks := func(what string) error {
		return errBadRequest("%s is not supported by the local E2B server", what)
	}
	switch {
	case f.AutoResume != nil && f.AutoResume.Enabled:
		return lacks("autoResume")
	case len(f.VolumeMounts) > 0 && !volumes:
		return lacks("volumeMounts")
	case !isNull(f.IAM):
		return lacks("iam")
	case !isNull(f.MCP):
		return lacks("mcp")
	}
	if n := f.Network; n != nil {
		switch {
		case !isNull(n.Rules) || !isNull(n.EgressProxy):
			return lacks("network egress rules (rules, egressProxy)")
		case n.MaskRequestHost != nil:
			return lacks("network.maskRequestHost")
		case len(n.HTTPSPorts) > 0:
			return lacks("network.httpsPorts")
		}
	}
	return nil
}

func isNull(m json.RawMessage) bool {
	t := strings.TrimSpace(string(m))
	return t == "" || t == "null"
}

func validEnvName(k string) bool {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return false
	}
	return true
}

// parseNew validates a create request into a sandbox (without its engine sandbox).
func (s *Server) parseNew(req newSandboxRequest, v2 bool) (*sandbox, time.Duration, error) {
	if req.TemplateID == "" {
		return nil, 0, errBadRequest("templateID is required")
	}
	if v2 && req.Timeout == nil {
		t := 300 // NewSandboxV2's default
		req.Timeout = &t
	}
	timeout, err := timeoutSeconds(req.Timeout)
	if err != nil {
		return nil, 0, err
	}
	if err := refuseV2(req.v2Fields, s.hasVolumes()); err != nil {
		return nil, 0, err
	}
	for k, v := range req.EnvVars {
		if !validEnvName(k) || strings.ContainsRune(v, 0) {
			return nil, 0, errBadRequest("invalid environment variable %q", k)
		}
	}
	for k := range req.Metadata {
		if k == "" {
			return nil, 0, errBadRequest("metadata keys must not be empty")
		}
	}
	hosts, only, err := egressRules(req.Network)
	if err != nil {
		return nil, 0, err
	}
	sb := &sandbox{id: "i" + newID(10), template: req.TemplateID, token: newID(16), metadata: req.Metadata,
		envVars: req.EnvVars, autoPause: req.AutoPause, procs: newProcTable(), forwards: map[int]*portfwd.Forwarder{},
		network:   s.o.Egress && (req.AllowInternet == nil || *req.AllowInternet) && (!only || len(hosts) > 0),
		diskPause: req.AutoPauseMemory != nil && !*req.AutoPauseMemory}
	if sb.network && only {
		sb.egressHosts = hosts
	}
	if n := req.Network; n != nil && n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic {
		sb.traffic = newID(16)
	}
	if !v2 && req.Secure != nil && !*req.Secure {
		sb.token = ""
	}
	if sb.metadata == nil {
		sb.metadata = map[string]string{}
	}
	return sb, timeout, nil
}

// create is POST /sandboxes (v1) and POST /v2/sandboxes.
func (s *Server) create(v2 bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var req newSandboxRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		sb, timeout, err := s.parseNew(req, v2)
		if err != nil {
			return err
		}
		if sb.volumes, err = s.volumeMounts(r.Context(), req.VolumeMounts); err != nil {
			return err
		}
		snap := ""
		if _, ok := s.templates[req.TemplateID]; !ok {
			snap = req.TemplateID
		}
		in, err := s.o.Engine.Create(r.Context(), s.spec(sb, snap))
		if errors.Is(err, engine.ErrNotFound) && snap != "" {
			return &apiError{http.StatusNotFound, "template '" + req.TemplateID + "' not found"}
		}
		if err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
		sb.engineID, sb.started = in.ID, s.o.Now()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = s.o.Engine.Terminate(context.WithoutCancel(r.Context()), in.ID)
			return &apiError{http.StatusServiceUnavailable, "server is shutting down"}
		}
		s.sandboxes[sb.id] = sb
		s.setTimeoutLocked(sb, timeout)
		s.mu.Unlock()
		s.log.Info("sandbox created", "sandbox_id", sb.id, "engine_id", in.ID, "template", req.TemplateID)
		writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
		return nil
	}
}
