package proliferate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// LogsOptions are the inputs of `services logs`.
type LogsOptions struct {
	Ctx     context.Context
	Factory *Factory
	Name    string
	Follow  bool
	Raw     bool
	Tail    int
}

// NewCmdServicesLogs builds `services logs`.
func NewCmdServicesLogs(f *Factory, runF func(*LogsOptions) error) *cobra.Command {
	o := &LogsOptions{Factory: f}
	cmd := &cobra.Command{
		Use:         "logs --name N [--follow] [--raw] [--tail N]",
		Annotations: required("name"),
		Short:       "Print a service's log",
		Example:     "  proliferate services logs --name web --tail 50\n  proliferate services logs --name web --follow --raw",
		Long: `Print a service's log as the sidecar streams it: each SSE payload
({"type":"initial"|"append"|"error",…}) on its own line. Without --follow it
stops after the first payload (an empty log, which the sidecar announces with
no payload at all, prints {"type":"initial","content":""} after 2 s); with
--follow it runs until the stream ends or Ctrl-C (exit 130).

--raw prints only the log text. --tail N prints the last N lines instead
({"lines":[…]}, or the bare lines with --raw).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
				return err
			}
			if cmd.Flags().Changed("tail") && o.Tail <= 0 {
				return usageErrorf("--tail must be a positive integer")
			}
			if o.Tail > 0 && o.Follow {
				return usageErrorf("--tail and --follow cannot be used together")
			}
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return logsRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", "", "service name (required)")
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().BoolVar(&o.Raw, "raw", false, "print only the log text")
	cmd.Flags().IntVar(&o.Tail, "tail", 0, "print the last N lines and exit")
	return cmd
}

func logsRun(o *LogsOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	out := o.Factory.IO.Out
	if o.Tail > 0 {
		body, err := c.Do(o.Ctx, http.MethodGet, sidecar.LogTailPath(o.Name, o.Tail), nil)
		if err != nil {
			return err
		}
		if !o.Raw {
			return printJSON(out, body)
		}
		var lines apitype.LogLinesResponse
		if err := json.Unmarshal(body, &lines); err != nil {
			return fmt.Errorf("decode log lines: %w", err)
		}
		for _, l := range lines.Lines {
			fmt.Fprintln(out, l)
		}
		return nil
	}
	stream, err := c.OpenStream(o.Ctx, sidecar.LogsPath(o.Name))
	if err != nil {
		if o.Ctx.Err() != nil {
			return &interruptedError{}
		}
		return err
	}
	defer stream.Close()
	// The sidecar sends no initial frame for an empty log; without --follow,
	// a quiet stream must not hang the caller, so it counts as an empty log.
	var idle atomic.Bool
	if !o.Follow {
		t := time.AfterFunc(o.Factory.LogsFirstFrameWait, func() {
			idle.Store(true)
			stream.Close()
		})
		defer t.Stop()
	}
	for {
		data, err := stream.Next()
		switch {
		case err == nil:
		case o.Ctx.Err() != nil:
			return &interruptedError{}
		case idle.Load():
			if o.Raw {
				return nil
			}
			// As the sidecar's frames always do, it carries a content string.
			return printJSON(out, []byte(`{"type":"initial","content":""}`))
		case errors.Is(err, io.EOF):
			return nil
		default:
			return fmt.Errorf("read log stream: %w", err)
		}
		var fr apitype.LogFrame
		_ = json.Unmarshal(data, &fr)
		if !o.Raw {
			if err := printJSON(out, data); err != nil {
				return err
			}
		} else if fr.Type == "error" {
			return errors.New(fr.Message)
		} else if _, err := io.WriteString(out, fr.Content); err != nil {
			return err
		}
		if !o.Follow {
			return nil
		}
	}
}
