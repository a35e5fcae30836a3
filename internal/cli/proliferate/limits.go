package proliferate

import (
	"errors"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// limitFlags maps a request field of rules.LimitError to the flag that sets it.
var limitFlags = map[string]string{
	"command":             "--command",
	"cwd":                 "--cwd",
	"env":                 "--env",
	"stopTimeoutMs":       "--stop-timeout",
	"maxRestarts":         "--max-restarts",
	"readiness.timeoutMs": "--ready-timeout",
	"readiness.http":      "--ready-http",
	"readiness.log":       "--ready-log",
}

// checkStartLimits refuses, as a usage error, a start request the sidecar
// would refuse for its bounds: the message is the sidecar's, after the flag.
func checkStartLimits(req apitype.StartServiceRequest) error {
	var le *rules.LimitError
	if !errors.As(req.Bounds().Check(), &le) {
		return nil
	}
	return usageErrorf("%s: %s", limitFlags[le.Field], le.Msg)
}
