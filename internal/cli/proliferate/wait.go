package proliferate

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// waiter waits for one service on behalf of `services start --wait` and
// `services wait`.
type waiter struct {
	f       *Factory
	c       *sidecar.Client
	name    string
	timeout time.Duration
	// stopOnTimeout stops the service when timeout runs out; stopFlag says
	// the command offers --stop-on-timeout, so the message can point to it.
	stopOnTimeout, stopFlag bool
	// listOnly is set once the sidecar turned out too old for
	// GET /api/services/{name}: later polls read the list alone.
	listOnly bool
}

// lookup is lookupService for the polls of one wait.
func (w *waiter) lookup(ctx context.Context) (svc apitype.ServiceInfo, fromList bool, err error) {
	if w.listOnly {
		svc, err = findInList(ctx, w.c, w.name)
		return svc, true, err
	}
	svc, fromList, err = lookupService(ctx, w.c, w.name)
	w.listOnly = fromList
	return svc, fromList, err
}

// checkWaitFlags checks the flags that shape --wait.
// settleSet and stopSet say whether --settle and --stop-on-timeout were given.
func checkWaitFlags(settleSet, stopSet, wait, probe bool, settle time.Duration) error {
	switch {
	case (settleSet || stopSet) && !wait:
		return usageErrorf("--settle and --stop-on-timeout need --wait")
	case settleSet && probe:
		return usageErrorf("--settle applies only without --ready-tcp, --ready-http or --ready-log")
	case settle < 0:
		return usageErrorf("--settle must not be negative")
	}
	return nil
}

// settled waits until the run started as started has kept running for
// settle, then prints {"service":…}. A service without a readiness probe is
// ready as soon as it runs, so the sidecar's word alone would call a command
// that dies a moment later ready. An exit (or a restart) of the run in the
// meantime fails with its last log lines.
func (w *waiter) settled(ctx context.Context, started apitype.ServiceInfo, settle time.Duration) error {
	begin := w.f.Now()
	deadline := begin.Add(w.timeout)
	t := time.NewTicker(w.f.ServicePoll)
	defer t.Stop()
	for {
		svc, _, err := w.lookup(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return &interruptedError{}
			}
			return err
		}
		now := w.f.Now()
		switch {
		case svc.Status != apitype.StatusRunning:
			return failWait(ctx, w.f, w.c, w.name, fmt.Sprintf("%s before it had run for %s", failReason(svc), settle))
		case started.StartedAt != 0 && (svc.StartedAt != started.StartedAt || svc.Restarts != started.Restarts):
			return failWait(ctx, w.f, w.c, w.name, fmt.Sprintf("exited and was restarted before it had run for %s", settle))
		case now.Sub(begin) >= settle:
			return printValue(w.f.IO.Out, apitype.ServiceResponse{Service: svc})
		case !now.Before(deadline):
			return w.timedOut(ctx, fmt.Sprintf("had not yet run for %s (--settle) after %s", settle, w.timeout))
		}
		select {
		case <-ctx.Done():
			return &interruptedError{}
		case <-t.C:
		}
	}
}

// timedOut ends a wait whose timeout ran out: it stops the service when
// asked to, prints the last log lines, and says what became of the service.
func (w *waiter) timedOut(ctx context.Context, reason string) error {
	if !w.stopOnTimeout {
		hint := fmt.Sprintf("stop it with `proliferate services stop --name %s`", w.name)
		if w.stopFlag {
			hint += " or pass --stop-on-timeout"
		}
		return failWait(ctx, w.f, w.c, w.name, fmt.Sprintf("%s; it was left running (%s)", reason, hint))
	}
	if _, err := w.c.Do(ctx, http.MethodDelete, sidecar.ServicePath(w.name), nil); err != nil {
		return failWait(ctx, w.f, w.c, w.name, fmt.Sprintf("%s; stopping it failed: %v", reason, err))
	}
	return failWait(ctx, w.f, w.c, w.name, reason+"; it was stopped (--stop-on-timeout)")
}
