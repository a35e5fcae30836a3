package proliferate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// WaitOptions are the inputs of `services wait`.
type WaitOptions struct {
	Ctx     context.Context
	Factory *Factory
	Name    string
	Timeout time.Duration
}

// NewCmdServicesWait builds `services wait`.
func NewCmdServicesWait(f *Factory, runF func(*WaitOptions) error) *cobra.Command {
	var (
		name    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:         "wait --name N [--timeout D]",
		Annotations: required("name"),
		Short:       "Wait until a service is ready",
		Example:     "  proliferate services wait --name web --timeout 30s",
		Long: `Wait until a service is ready and print it. A service waiting to be restarted
is waited for; one that stopped or gave up fails the command: the last 20 log
lines go to stderr and the exit code is 1.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
				return err
			}
			if timeout <= 0 {
				return usageErrorf("--timeout must be a positive duration")
			}
			o := &WaitOptions{Ctx: cmd.Context(), Factory: f, Name: name, Timeout: timeout}
			if runF != nil {
				return runF(o)
			}
			c, err := f.Sidecar()
			if err != nil {
				return err
			}
			return (&waiter{f: f, c: c, name: o.Name, timeout: o.Timeout}).ready(o.Ctx)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "service name (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

// ready polls the service until it is ready and prints {"service":…}. On
// failure it prints the last 20 log lines on stderr and returns the reason.
func (w *waiter) ready(ctx context.Context) error {
	deadline := w.f.Now().Add(w.timeout)
	t := time.NewTicker(w.f.ServicePoll)
	defer t.Stop()
	for {
		svc, fromList, err := w.lookup(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return &interruptedError{}
			}
			return err
		}
		ready := svc.Ready || (fromList && svc.Status == apitype.StatusRunning)
		switch {
		case ready && svc.Status == apitype.StatusRunning:
			return printValue(w.f.IO.Out, apitype.ServiceResponse{Service: svc})
		case svc.Status == apitype.StatusStopped,
			svc.Status == apitype.StatusError && svc.NextRestartAt == nil:
			return failWait(ctx, w.f, w.c, w.name, failReason(svc))
		}
		if !w.f.Now().Before(deadline) {
			return w.timedOut(ctx, fmt.Sprintf("not ready after %s", w.timeout))
		}
		select {
		case <-ctx.Done():
			return &interruptedError{}
		case <-t.C:
		}
	}
}

// failReason says why a service that will not become ready ended.
func failReason(s apitype.ServiceInfo) string {
	switch {
	case s.Reason != "":
		return s.Reason
	case s.ExitCode != nil:
		return "exited with code " + strconv.Itoa(*s.ExitCode)
	}
	return "is " + s.Status
}

func failWait(ctx context.Context, f *Factory, c *sidecar.Client, name, reason string) error {
	if lines, err := c.LogTail(ctx, name, 20); err == nil && len(lines) > 0 {
		fmt.Fprintf(f.IO.ErrOut, "Last %d log lines of %q:\n", len(lines), name)
		for _, l := range lines {
			fmt.Fprintln(f.IO.ErrOut, l)
		}
	}
	return fmt.Errorf("Service %q %s", name, reason)
}
