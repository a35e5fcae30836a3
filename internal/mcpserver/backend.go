package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Manager is the service manager's surface that Direct uses.
type Manager interface {
	List() []apitype.ServiceInfo
	Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error)
	Stop(ctx context.Context, name string) error
}

// PortStore keeps the exposed port where the API server restores it from
// (statefile.ExposedPort).
type PortStore interface {
	Load() (*int, error)
	Save(port int) error
}

// LogReader returns the last lines of a service's log.
type LogReader interface {
	Tail(name string, n int) ([]string, error)
}

// Direct acts on the state dir from this process, for when no API server runs.
// The API server adopts what it started when it comes up.
type Direct struct {
	Manager Manager
	Logs    LogReader
	Exposed PortStore
}

// List implements Backend.
func (d *Direct) List(context.Context) ([]apitype.ServiceInfo, *int, error) {
	exposed, err := d.Exposed.Load()
	if err != nil {
		return nil, nil, err
	}
	return d.Manager.List(), exposed, nil
}

// Start implements Backend.
func (d *Direct) Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	return d.Manager.Start(ctx, req)
}

// Stop implements Backend.
func (d *Direct) Stop(ctx context.Context, name string) error { return d.Manager.Stop(ctx, name) }

// Expose implements Backend: without an API server there is no preview proxy
// yet, so the port is recorded for it to pick up.
func (d *Direct) Expose(_ context.Context, port int) (string, error) {
	if err := d.Exposed.Save(port); err != nil {
		return "", err
	}
	return "No sidecar API is running right now; the preview routes to this port as soon as it starts.", nil
}

// LogTail implements Backend.
func (d *Direct) LogTail(_ context.Context, name string, n int) ([]string, error) {
	lines, err := d.Logs.Tail(name, n)
	if err != nil {
		return nil, errors.New(rules.NoLogs(name))
	}
	return lines, nil
}

// Remote acts through the API server, so the two never manage the same
// services side by side.
type Remote struct {
	Client *sidecar.Client
}

// List implements Backend.
func (r *Remote) List(ctx context.Context) ([]apitype.ServiceInfo, *int, error) {
	resp, err := r.Client.ListServices(ctx)
	if err != nil {
		return nil, nil, err
	}
	return resp.Services, resp.ExposedPort, nil
}

// Start implements Backend.
func (r *Remote) Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	return r.Client.StartService(ctx, req)
}

// Stop implements Backend.
func (r *Remote) Stop(ctx context.Context, name string) error { return r.Client.StopService(ctx, name) }

// Expose implements Backend.
func (r *Remote) Expose(ctx context.Context, port int) (string, error) {
	_, err := r.Client.Expose(ctx, port)
	var ae *sidecar.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusBadGateway {
		return "", fmt.Errorf("port %d is recorded, but the preview site does not route to it yet: %s", port, ae.Message)
	}
	return "", err
}

// LogTail implements Backend.
func (r *Remote) LogTail(ctx context.Context, name string, n int) ([]string, error) {
	return r.Client.LogTail(ctx, name, n)
}

// Auto sends each call to the API server when it answers, and acts directly
// on the state dir when nothing listens there.
type Auto struct {
	// Probe reports whether the API server is up: nil when it is,
	// ErrNoServer when nothing listens, any other error to refuse the call
	// (for instance a server that rejects our token, which must not be fought).
	Probe  func(ctx context.Context) error
	Remote Backend
	// Direct builds the direct backend on first use.
	Direct func() (Backend, error)

	once      sync.Once
	direct    Backend
	directErr error
}

// ErrNoServer is what Probe returns when no API server listens.
var ErrNoServer = errors.New("no sidecar API server is listening")

func (a *Auto) pick(ctx context.Context) (Backend, error) {
	err := a.Probe(ctx)
	switch {
	case err == nil:
		return a.Remote, nil
	case errors.Is(err, ErrNoServer):
		a.once.Do(func() { a.direct, a.directErr = a.Direct() })
		return a.direct, a.directErr
	default:
		return nil, err
	}
}

// List implements Backend.
func (a *Auto) List(ctx context.Context) ([]apitype.ServiceInfo, *int, error) {
	b, err := a.pick(ctx)
	if err != nil {
		return nil, nil, err
	}
	return b.List(ctx)
}

// Start implements Backend.
func (a *Auto) Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	b, err := a.pick(ctx)
	if err != nil {
		return apitype.ServiceInfo{}, err
	}
	return b.Start(ctx, req)
}

// Stop implements Backend.
func (a *Auto) Stop(ctx context.Context, name string) error {
	b, err := a.pick(ctx)
	if err != nil {
		return err
	}
	return b.Stop(ctx, name)
}

// Expose implements Backend.
func (a *Auto) Expose(ctx context.Context, port int) (string, error) {
	b, err := a.pick(ctx)
	if err != nil {
		return "", err
	}
	return b.Expose(ctx, port)
}

// LogTail implements Backend.
func (a *Auto) LogTail(ctx context.Context, name string, n int) ([]string, error) {
	b, err := a.pick(ctx)
	if err != nil {
		return nil, err
	}
	return b.LogTail(ctx, name, n)
}
