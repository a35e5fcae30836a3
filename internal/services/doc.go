// Package services is the sidecar's service manager: it starts long-running
// commands (dev servers) in their own process groups, records them in the
// state file shared by every sidecar process, re-adopts them after a sidecar
// restart, supervises them (restart policies, readiness probes) and stops them
// without leaving any process behind. cmd/sandbox-mcp wires it into the HTTP
// API (internal/api) and the MCP mode; it knows nothing of HTTP.
//
// Every service runs under a small monitor: the sidecar's own binary
// re-executed in a hidden mode (see RunMonitorIfRequested), named
// mcp-svc-monitor. The monitor starts `bash -c <command>` at a lower priority,
// keeps it only once the sidecar acknowledges that the run is recorded,
// copies its output into the rotating log file, records the exit code, reaps
// orphaned descendants as a child subreaper and outlives the sidecar, so a
// sidecar restart never takes a dev server down. docs/services-lifecycle.md
// describes how no process is lost when the sidecar, a monitor or the disk fails.
package services
