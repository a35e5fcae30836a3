// Package local is the engine (engine.Engine) that runs sandboxes on this machine:
// each sandbox is a container of an OCI runtime (runc) with the production layout
// inside. The one provider (provider.New) boots the platform's sandboxes on it: local
// repositories (paths and file:// URLs) are bound read-only into the sandbox at the
// same path (engine.HostBinder), and sandbox-mcp listens on its production port 4000,
// reached through a tunnel.
//
// It exists so the host-side logic of package provider can be run end to end without
// a cloud account, by tests, examples, developers and sandboxctl.
//
// # Where things are
//
// This package is the engine's core: the Engine and its options (engine.go), the
// sandboxes it knows (boxes.go), a sandbox's life (prepare.go, lifecycle.go), what it
// does with a running one (exec.go, files.go, dialport.go, snapshot_engine.go,
// image.go, volumes.go), the processes that keep a sandbox (the host-side shim:
// shim.go, shim_start.go; init inside: sandboxinit.go, initserver.go, initstreams.go,
// spawner.go, proto.go; the hidden modes that run them: hidden.go) and who may talk to
// them (auth.go, userns.go, process.go). Each concern a newcomer can name is a
// package of its own, imported by this one only:
//
//   - oci: the OCI runtime (runc, and why another is refused) and the bundle's
//     config.json (Docker's capabilities, masked paths and seccomp profile).
//   - rootfs: the sandbox's root filesystem, built by the shim: the host's system
//     directories or an image's layers, its /etc, its binds.
//   - cgroup: the sandbox's cgroups: limits, pause (the freezer), removal and sweep.
//   - volume: storage on loop-mounted ext4: named volumes (Store) and each
//     sandbox's disk (Disks).
//   - netns: reaching into the sandbox's network namespace: dialing its ports,
//     serving its tunnels and its egress proxy (package egress's).
//   - state: the one record the engine keeps of each sandbox (state.json) and
//     whether its processes live.
//
// The hidden modes are opt-in: every main that uses the engine calls MaybeRunInit
// first, as runc's binary does; no library init() exits the process.
package local
