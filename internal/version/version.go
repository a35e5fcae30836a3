// Package version says which build of sandbox-mcp is running. Every binary
// prints it for --version, the API reports it in GET /api/health and the MCP
// mode in its serverInfo. Imported by cmd/* only (they pass it on).
//
// A release build stamps it with
//
//	go build -ldflags "-X github.com/proliferate-ai/sandbox-mcp/internal/version.Version=v1.2.3"
//
// (scripts/release does). Without that, it comes from the build info Go
// records: the module version (a tag, or a pseudo-version such as
// v0.0.0-20261123185511-1323801abcde+dirty for a `go build` in a git
// checkout), and the VCS revision and dirty flag when the build stamped them.
package version

import (
	"runtime/debug"
	"strings"
)

// Version is set at link time with -ldflags "-X …/internal/version.Version=…".
var Version string

// Info is what is known about the running build.
type Info struct {
	// Version is the stamped version, else the module version, else "devel".
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, when recorded.
	Revision string `json:"revision,omitempty"`
	// Dirty reports uncommitted changes in the checkout at build time.
	Dirty bool `json:"dirty,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"goVersion,omitempty"`
}

// Get reads the running binary's build information.
func Get() Info { return fromBuildInfo(Version, readBuildInfo()) }

func readBuildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

// fromBuildInfo combines the link-time stamp with bi (nil when unknown).
func fromBuildInfo(stamp string, bi *debug.BuildInfo) Info {
	in := Info{Version: stamp}
	if bi != nil {
		in.GoVersion = bi.GoVersion
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.modified":
				in.Dirty = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	return in
}

// String is the one-token form for --version, health and serverInfo: the
// version, then "+<12-digit revision>" unless the version already names it,
// then "+dirty" for a modified checkout unless already said.
func (in Info) String() string {
	s := in.Version
	if rev := short(in.Revision); rev != "" && !strings.Contains(s, rev) {
		s += "+" + rev
	}
	if in.Dirty && !strings.Contains(s, "dirty") {
		s += "+dirty"
	}
	return s
}

// String is Get().String().
func String() string { return Get().String() }

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
