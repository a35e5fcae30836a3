// Package image is the sandbox image defined once, in Go: a base (FROM) plus ordered
// steps. From one Image value come the Modal image (provider/modal renders its
// DockerfileCommands), deploy/Dockerfile and the E2B template's Dockerfile (Dockerfile,
// E2BDockerfile), the local build (provider/image/build) and the content keys that make
// cache busting automatic (Keys, Key; provider.ComputeBaseSnapshotVersionKey includes
// the default image's key).
//
// A step's key is the SHA-256 of its parent's key, its canonical form (one Dockerfile
// line) and the hash of the files it copies, so a changed step changes its own key and
// every key after it, and nothing before it.
package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Kind is what a step does.
type Kind string

// Step kinds. Env, WorkDir and User only change the image's configuration; the others
// make a layer.
const (
	KindApt     Kind = "apt"     // install Debian packages
	KindRun     Kind = "run"     // run shell commands
	KindEnv     Kind = "env"     // set environment variables
	KindWorkDir Kind = "workdir" // set the working directory
	KindUser    Kind = "user"    // set the user of later steps and commands
	KindCopy    Kind = "copy"    // copy local files
	KindBinary  Kind = "binary"  // install one of our static binaries in rules.BinDir
)

// EnvVar is one variable of an Env step.
type EnvVar struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Step is one instruction of an image. Which fields count depends on Kind; build steps
// with the constructors (Apt, Run, …) and check them with Validate.
type Step struct {
	Kind Kind `json:"kind"`
	// Comment is printed above the step in Dockerfiles; it is not part of the key.
	Comment string `json:"comment,omitempty"`
	// Packages (apt) are installed without recommends.
	Packages []string `json:"packages,omitempty"`
	// Commands (run) run in one shell, joined by &&.
	Commands []string `json:"commands,omitempty"`
	// Env (env) are set in order.
	Env []EnvVar `json:"env,omitempty"`
	// Path is the directory of a workdir step.
	Path string `json:"path,omitempty"`
	// User (user) is a user name or uid.
	User string `json:"user,omitempty"`
	// Src (copy) is a file or folder relative to the build's context directory;
	// Dst is the absolute path it becomes.
	Src string `json:"src,omitempty"`
	Dst string `json:"dst,omitempty"`
	// Name (binary) is the program's name: dist/linux_<arch>/<name> in Dockerfiles, a
	// URL on Modal, a host file in local builds (Sources).
	Name string `json:"name,omitempty"`
}

// Image is a base plus ordered steps.
type Image struct {
	// Name is the name a local build is tagged with (optional).
	Name string `json:"name,omitempty"`
	// From is the base image reference, e.g. debian:bookworm-slim.
	From  string `json:"from"`
	Steps []Step `json:"steps"`
	// Expose and Cmd are for `docker run` of the Dockerfile (and the local image's
	// configuration); providers start their own commands.
	Expose []int    `json:"expose,omitempty"`
	Cmd    []string `json:"cmd,omitempty"`
	// Header is the comment at the top of rendered Dockerfiles.
	Header string `json:"header,omitempty"`
}

// Apt installs Debian packages (sorted and deduplicated: their order does not matter).
func Apt(packages ...string) Step {
	p := slices.Clone(packages)
	slices.Sort(p)
	return Step{Kind: KindApt, Packages: slices.Compact(p)}
}

// Run runs commands in one shell, each only if the one before succeeded.
func Run(commands ...string) Step { return Step{Kind: KindRun, Commands: commands} }

// Env sets variables: Env("A", "1", "B", "2"). An odd count panics (a programming error).
func Env(kv ...string) Step {
	if len(kv)%2 != 0 {
		panic("image.Env: odd number of arguments")
	}
	s := Step{Kind: KindEnv}
	for i := 0; i < len(kv); i += 2 {
		s.Env = append(s.Env, EnvVar{kv[i], kv[i+1]})
	}
	return s
}

// WorkDir sets the working directory of later steps and of commands.
func WorkDir(dir string) Step { return Step{Kind: KindWorkDir, Path: dir} }

// User sets the user of later steps and of commands.
func User(name string) Step { return Step{Kind: KindUser, User: name} }

// Copy copies src (relative to the build context) to the absolute path dst.
func Copy(src, dst string) Step { return Step{Kind: KindCopy, Src: src, Dst: dst} }

// Binary installs our static binary name in rules.BinDir.
func Binary(name string) Step { return Step{Kind: KindBinary, Name: name} }

// With returns s with a Dockerfile comment.
func (s Step) With(comment string) Step {
	s.Comment = comment
	return s
}

// MakesLayer reports whether the step changes files (an Env, WorkDir or User step only
// changes the configuration).
func (s Step) MakesLayer() bool {
	switch s.Kind {
	case KindEnv, KindWorkDir, KindUser:
		return false
	}
	return true
}

var (
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	packageRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9+.\-]*(:[a-z0-9]+)?(=[A-Za-z0-9.+~:\-]+)?$`)
	userRE     = regexp.MustCompile(`^[a-z_][a-z0-9_\-]*$|^[0-9]+$`)
	binaryRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._\-]*$`)
	errInvalid = errors.New("invalid image")
)

// ErrInvalid is matched (errors.Is) by every error Validate returns.
var ErrInvalid = errInvalid

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}

// Validate reports the first reason img cannot be rendered or built, or nil.
func (img Image) Validate() error {
	if img.From == "" || strings.ContainsAny(img.From, " \t\r\n") {
		return invalid("from %q is not an image reference", img.From)
	}
	for i, s := range img.Steps {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	for _, p := range img.Expose {
		if p < 1 || p > 65535 {
			return invalid("expose %d is not a port", p)
		}
	}
	for _, c := range img.Cmd {
		if strings.ContainsAny(c, "\r\n") {
			return invalid("cmd argument %q has a line break", c)
		}
	}
	return nil
}

// Validate reports why s is not a valid step, or nil.
func (s Step) Validate() error {
	if strings.ContainsAny(s.Comment, "\r") {
		return invalid("comment has a carriage return")
	}
	switch s.Kind {
	case KindApt:
		if len(s.Packages) == 0 {
			return invalid("apt step without packages")
		}
		for _, p := range s.Packages {
			if !packageRE.MatchString(p) {
				return invalid("%q is not a Debian package name", p)
			}
		}
	case KindRun:
		if len(s.Commands) == 0 {
			return invalid("run step without commands")
		}
		for _, c := range s.Commands {
			if strings.TrimSpace(c) == "" || strings.ContainsAny(c, "\r\n") {
				return invalid("run command %q is empty or has a line break", c)
			}
		}
	case KindEnv:
		if len(s.Env) == 0 {
			return invalid("env step without variables")
		}
		for _, e := range s.Env {
			if !envKeyRE.MatchString(e.Key) {
				return invalid("%q is not an environment variable name", e.Key)
			}
			if strings.ContainsAny(e.Value, "\r\n\x00") {
				return invalid("env %s has a line break or NUL", e.Key)
			}
		}
	case KindWorkDir:
		return checkAbs("workdir", s.Path)
	case KindUser:
		if !userRE.MatchString(s.User) {
			return invalid("%q is not a user name or uid", s.User)
		}
	case KindCopy:
		if s.Src == "" || path.IsAbs(s.Src) || !filepath.IsLocal(s.Src) || strings.ContainsAny(s.Src, " \t\r\n") {
			return invalid("copy source %q must be a path inside the context without spaces", s.Src)
		}
		return checkAbs("copy destination", s.Dst)
	case KindBinary:
		if !binaryRE.MatchString(s.Name) {
			return invalid("%q is not a binary name", s.Name)
		}
	default:
		return invalid("unknown step kind %q", s.Kind)
	}
	return nil
}

func checkAbs(what, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, " \t\r\n") {
		return invalid("%s %q must be a clean absolute path without spaces", what, p)
	}
	return nil
}

// Parse reads an image definition in JSON (the fields of Image and Step) and validates
// it. Unknown fields are an error, so a misspelled field is not silently ignored.
func Parse(data []byte) (Image, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var img Image
	if err := dec.Decode(&img); err != nil {
		return Image{}, fmt.Errorf("%w: %v", errInvalid, err)
	}
	if dec.More() {
		return Image{}, invalid("trailing data after the definition")
	}
	return img, img.Validate()
}
