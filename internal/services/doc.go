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
//
// # Files
//
// manager.go holds Config, Manager, instance and New; validate.go is where a
// start request enters: parse runs the one validation
// (apitype.StartServiceRequest.Validate, shared with the CLI and the MCP
// server) and fills the defaults into a spec, the one shape of a service's
// options from the request to its record and back for every restart;
// launch.go starts runs (Start, Restart, launch); stop.go stops
// them; state.go is the file format, state_lock.go the read-modify-write of
// it; query.go answers List, Get and LogPath; supervise.go handles exits and
// restart policies; probe.go readiness probes (readiness.go checks that the
// listener belongs to the run); events.go fans events out; adopt.go takes
// over runs at start-up and from other processes; orphans.go sweeps what a
// crashed sidecar left; monitor.go is the per-service monitor process.
//
// # State and locks
//
// The state file <StateDir>/state.json is shared by every process on the
// state dir (the API server and MCP direct mode). Every change of it is a
// read-modify-write in update or updateDurable (state_lock.go), which takes
// in this order: writeMu (this process), the flock on <StateDir>/state.lock
// (statefile.Lock, every process, exposure's writer included), and mu only
// to swap the cached copy st. Start, Stop, Restart and
// the restart path hold lockName(name) around it; that lock is per process,
// so each write also checks that the record's Instance is still the run it
// acts on. A launch holds <StateDir>/launch.lock shared (a restart from
// before its claim); New holds it exclusive around the orphan sweep and adopt.
//
// An exit moves a record from running to its next state in one update:
// waiting to restart (error with NextRestartAt) or ended (stopped, error, or
// error with "gave up" once the restarts are spent). A restart being launched
// keeps NextRestartAt until the new run's record replaces it, so no reader
// ever sees a service that looks as if it gave up and then runs again.
//
// Who writes which record field (all inside update, so under writeMu and the
// flock; "name" means lockName is held too):
//
//	field                                   writer (file)               lock   only if
//	Name Command Cwd PID PGID StartTime     launch (launch.go)          name   admit passes
//	  MonitorPID MonitorStartTime Instance
//	  Status=running StartedAt LogFile
//	  Ready Restarts Consecutive, options
//	  NextRestartAt StoppedAt Reason
//	  StopRequested RestartClaimed (cleared)
//	Order                                   launch, a name's first run  name   -
//	StopRequested                           stopLocked (stop.go)        name   Instance is the stopped run
//	Status=stopped StoppedAt Ready          stopLocked                  name   Instance is the stopped run
//	  NextRestartAt=nil
//	ExitedInstance                          recordExit (supervise.go)   -      Instance is the run, exit not yet recorded
//	Status ExitCode LastExitAt Ready Reason recordExit via applyExit    -      as above, and no stop requested
//	Consecutive Restarts NextRestartAt      recordExit via applyPolicy  -      as above, in the same update
//	  Status=error Reason RestartClaimed=""
//	RestartClaimed (claims the restart)     relaunchAfter               name   NextRestartAt set, unclaimed, Instance is the run
//	Status=error Reason NextRestartAt=nil   relaunchAfter, launch fails name   Instance is the run
//	  RestartClaimed=""
//	RestartClaimed="" (stale claim)         adopt (adopt.go)            -      in New, launch.lock held exclusively
//	Ready=true                              markReady (probe.go)        -      Status running, Instance is the run
//	StartTime PGID (entries without them)   adopt (adopt.go)            -      in New, before any watcher runs
//	ExitedInstance Status ExitCode ...      adopt via applyExit         -      run ended while no sidecar watched
//	PID PGID StartTime Monitor* Status      sanitizeState (state.go)    -      untrusted process ids, on every read
//	  Reason Ready NextRestartAt
//	ExposedPort: exposure's, not ours       statefile.ExposedPort.Save  -      kept as read by every update
//
// In memory: mu guards st, stamp, gen and pending (written by updateState
// and refresh only); instMu guards inst (current, setCurrent, Close); subMu
// guards subs (Subscribe, emit, Close); namesMu guards names. An instance is
// built only by newInstance and not changed once shared, except stopping and
// failReason, which are atomics.
package services
