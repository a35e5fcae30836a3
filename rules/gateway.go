package rules

import "time"

// Lifetimes of an egress gateway's credentials (provider/egress/gateway): a sandbox's
// credential dies GatewayGrace after the sandbox's own Timeout, whether or not anyone
// terminates the sandbox.
const (
	// GatewayGrace is how long a credential outlives its sandbox's Timeout: the
	// platform's clock and ours may differ, and a sandbox's last requests may still
	// be under way when it ends.
	GatewayGrace = 5 * time.Minute
	// MaxGatewayTTL bounds a credential's lifetime as registered (a day beyond the
	// longest sandbox Modal or E2B keep running).
	MaxGatewayTTL = 48 * time.Hour
)
