// Package debian builds Debian base images (debian:<suite>, debian:<suite>-slim)
// offline of any container registry: mmdebstrap installs the suite's packages from
// Debian's package mirror into a tar, which becomes a one-layer image in the local
// store (provider/image/store). The image builder (provider/image/build) calls it for a
// FROM that the store does not have yet; a build takes about 20 s, once.
package debian

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// ErrNoMmdebstrap: mmdebstrap is not installed (apt-get install mmdebstrap).
var ErrNoMmdebstrap = errors.New("mmdebstrap is not installed (apt-get install mmdebstrap)")

// DefaultMirror is used when neither Options.Mirror nor the machine's apt sources name
// a Debian mirror.
const DefaultMirror = "http://deb.debian.org/debian"

var refRE = regexp.MustCompile(`^debian:([a-z]+)(-slim)?$`)

// ParseRef reports whether ref is a Debian base this package builds, and its suite.
func ParseRef(ref string) (suite string, slim, ok bool) {
	m := refRE.FindStringSubmatch(ref)
	if m == nil || m[1] == "latest" {
		return "", false, false
	}
	return m[1], m[2] != "", true
}

// Options configure Build.
type Options struct {
	// Mirror is the Debian mirror; empty means the first Debian mirror of the machine's
	// apt sources, else DefaultMirror.
	Mirror string
	// Mmdebstrap is the program; empty means mmdebstrap from PATH.
	Mmdebstrap string
	// Log receives mmdebstrap's progress; nil discards it.
	Log io.Writer
}

// slimExcludes are the paths debian:*-slim leaves out (as Docker's slim images do):
// documentation, manuals and translations, keeping copyright files.
var slimExcludes = []string{
	"path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
	"path-exclude=/usr/share/groff/*", "path-exclude=/usr/share/lintian/*", "path-exclude=/usr/share/linda/*",
}

// Config is the base images' configuration.
var Config = store.Config{
	Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	Cmd: []string{"bash"},
}

// Args are mmdebstrap's arguments for suite, writing the tar to stdout.
func Args(suite string, slim bool, mirror string) []string {
	args := []string{"--variant=minbase", "--format=tar", "--skip=output/dev"}
	if slim {
		for _, e := range slimExcludes {
			args = append(args, "--dpkgopt="+e)
		}
	}
	return append(args, suite, "-", mirror)
}

// Build builds ref (see ParseRef) with mmdebstrap and stores it under that name in s;
// it returns the image id. A ref already in s is not rebuilt.
func Build(ctx context.Context, s *store.Store, ref string, o Options) (string, error) {
	if in, err := s.Get(ctx, ref); err == nil {
		return in.ID, nil
	}
	suite, slim, ok := ParseRef(ref)
	if !ok {
		return "", fmt.Errorf("%q is not a Debian base (debian:<suite> or debian:<suite>-slim)", ref)
	}
	prog := o.Mmdebstrap
	if prog == "" {
		p, err := exec.LookPath("mmdebstrap")
		if err != nil {
			return "", ErrNoMmdebstrap
		}
		prog = p
	}
	mirror := o.Mirror
	if mirror == "" {
		mirror = MachineMirror("/etc/apt")
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	cmd := exec.CommandContext(ctx, prog, Args(suite, slim, mirror)...)
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start mmdebstrap: %w", err)
	}
	// The image is named only once mmdebstrap has succeeded: a build killed halfway
	// (a timeout, a signal) ends its tar early, and that partial root must never
	// stand under ref for the next caller to boot.
	id, importErr := s.ImportRootFS(ctx, out, "", Config, "mmdebstrap "+strings.Join(Args(suite, slim, mirror), " "))
	if importErr != nil {
		_, _ = io.Copy(io.Discard, out) // let mmdebstrap finish writing before Wait
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("mmdebstrap %s: %w", ref, err)
	}
	if importErr != nil {
		return "", importErr
	}
	if err := s.Tag(ctx, id, ref); err != nil {
		return "", err
	}
	return id, nil
}

// MachineMirror is the first Debian mirror of the apt sources under aptDir
// (sources.list and sources.list.d, one-line and deb822 formats), else DefaultMirror.
func MachineMirror(aptDir string) string {
	files := []string{filepath.Join(aptDir, "sources.list")}
	more, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*"))
	files = append(files, more...)
	for _, f := range files {
		if m := mirrorIn(f); m != "" {
			return m
		}
	}
	return DefaultMirror
}

func mirrorIn(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		var uris []string
		switch {
		case len(fields) >= 3 && fields[0] == "deb":
			uris = fields[1:2]
			if strings.HasPrefix(fields[1], "[") { // deb [options] URI suite
				for i, fld := range fields {
					if strings.HasSuffix(fld, "]") && i+1 < len(fields) {
						uris = fields[i+1 : i+2]
						break
					}
				}
			}
		case len(fields) >= 2 && fields[0] == "URIs:":
			uris = fields[1:]
		}
		for _, u := range uris {
			if (strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) && strings.HasSuffix(strings.TrimRight(u, "/"), "/debian") {
				return strings.TrimRight(u, "/")
			}
		}
	}
	return ""
}
