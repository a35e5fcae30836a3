package modalserver

import (
	"context"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// --- readiness probes -------------------------------------------------------------------
//
// A sandbox created with a readiness probe is probed from its creation until the probe
// passes once (a TCP connect to its port through Engine.DialPort, or an exec of the
// probe's command that exits 0), every IntervalMs (default 100 ms). WaitUntilReady
// waits for that moment.

const defaultProbeInterval = 100 * time.Millisecond

// probeOnce runs the probe one time.
func (s *Server) probeOnce(ctx context.Context, sb *sandbox, p *pb.Probe) bool {
	if p.HasTcpPort() {
		c, err := s.o.Engine.DialPort(ctx, sb.engineID, int(p.GetTcpPort()))
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	argv := p.GetExecCommand().GetArgv()
	if len(argv) == 0 {
		return false
	}
	code, err := s.o.Engine.Exec(ctx, sb.engineID, engine.ExecRequest{Argv: argv, Cwd: sb.workdir, Timeout: 10 * time.Second})
	return err == nil && code == 0
}

// startProbe probes sb until its probe passes, the sandbox ends or the server closes.
func (s *Server) startProbe(sb *sandbox, p *pb.Probe) {
	interval := time.Duration(p.GetIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = defaultProbeInterval
	}
	ctx, cancel := context.WithCancel(s.ctx())
	s.wg.Add(2)
	go func() { // the probe's exec ends with the sandbox
		defer s.wg.Done()
		select {
		case <-sb.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer s.wg.Done()
		defer cancel()
		for !s.probeOnce(ctx, sb, p) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
		s.mu.Lock()
		sb.readyAt = s.o.Now()
		s.mu.Unlock()
		close(sb.ready)
	}()
}

func (r *routerServer) SandboxWaitUntilReady(ctx context.Context, req *pb.SandboxWaitUntilReadyTcrRequest) (*pb.SandboxWaitUntilReadyTcrResponse, error) {
	sb, err := r.s.lookupTask(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if sb.ready == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox '%s' has no readiness probe", sb.id)
	}
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(float64(t)*float64(time.Second)))
		defer cancel()
	}
	select {
	case <-sb.ready:
	case <-sb.ended:
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox '%s' ended before it was ready", sb.id)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	r.s.mu.Lock()
	at := sb.readyAt
	r.s.mu.Unlock()
	return pb.SandboxWaitUntilReadyTcrResponse_builder{ReadyAt: float64(at.UnixNano()) / 1e9}.Build(), nil
}
