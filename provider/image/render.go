package image

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Canonical is the step as one Dockerfile line: the form its key hashes. A binary step
// is "BINARY <name>" (where the file comes from is in the key's file hash).
func (s Step) Canonical() string {
	switch s.Kind {
	case KindApt:
		return "RUN " + strings.Join(aptCommands(s.Packages), " && ")
	case KindRun:
		return "RUN " + strings.Join(s.Commands, " && ")
	case KindEnv:
		parts := make([]string, len(s.Env))
		for i, e := range s.Env {
			parts[i] = e.Key + "=" + quoteEnv(e.Value)
		}
		return "ENV " + strings.Join(parts, " ")
	case KindWorkDir:
		return "WORKDIR " + s.Path
	case KindUser:
		return "USER " + s.User
	case KindCopy:
		return "COPY " + s.Src + " " + s.Dst
	case KindBinary:
		return "BINARY " + s.Name
	}
	return string(s.Kind)
}

// Shell is the shell command of a run or apt step ("" for other steps).
func (s Step) Shell() string {
	switch s.Kind {
	case KindApt:
		return strings.Join(aptCommands(s.Packages), " && ")
	case KindRun:
		return strings.Join(s.Commands, " && ")
	}
	return ""
}

func aptCommands(packages []string) []string {
	return []string{"apt-get update",
		"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + strings.Join(packages, " "),
		"rm -rf /var/lib/apt/lists/*"}
}

// BinaryPath is where a binary step installs name.
func BinaryPath(name string) string { return rules.BinDir + "/" + name }

// quoteEnv quotes an ENV value the way Dockerfiles read it, only when it needs it.
func quoteEnv(v string) string {
	safe := v != ""
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_./:@%+,=-", c)) {
			safe = false
			break
		}
	}
	if safe {
		return v
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(v) + `"`
}

// dockerfileStep is s as it reads in a Dockerfile: long RUN lines broken at &&, a
// binary step as a COPY from the release's dist folder of arch.
func (s Step) dockerfileStep(arch string) string {
	switch s.Kind {
	case KindApt:
		c := aptCommands(s.Packages)
		return "RUN " + strings.Join(c, " \\\n && ")
	case KindRun:
		return "RUN " + strings.Join(s.Commands, " \\\n && ")
	case KindEnv:
		parts := make([]string, len(s.Env))
		for i, e := range s.Env {
			parts[i] = e.Key + "=" + quoteEnv(e.Value)
		}
		return "ENV " + strings.Join(parts, " \\\n    ")
	case KindBinary:
		return "COPY dist/linux_" + arch + "/" + s.Name + " " + BinaryPath(s.Name)
	}
	return s.Canonical()
}

// Dockerfile is the image as a Dockerfile for `docker build` from the repository's root
// after scripts/release: binaries come from dist/linux_${TARGETARCH}/. deploy/Dockerfile
// is this text (sandboxctl image dockerfile).
func (img Image) Dockerfile() string {
	return img.dockerfile("${TARGETARCH}", true)
}

// E2BDockerfile is the image as an E2B template's Dockerfile (e2b.Dockerfile): amd64
// binaries, and no EXPOSE or CMD (E2B starts its own envd; the template's start
// command is given to `e2b template build`).
func (img Image) E2BDockerfile() string {
	return img.dockerfile("amd64", false)
}

func (img Image) dockerfile(arch string, docker bool) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(img.Header, "\n"), "\n") {
		if l == "" && img.Header == "" {
			break
		}
		b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
	if !docker {
		b.WriteString("#\n# E2B template: e2b template build -d e2b.Dockerfile (amd64 binaries from dist/).\n")
	}
	b.WriteString("FROM " + img.From + "\n")
	if docker && img.hasBinary() {
		b.WriteString("\nARG TARGETARCH=amd64\n")
	}
	for _, s := range img.Steps {
		b.WriteString("\n")
		for _, l := range strings.Split(s.Comment, "\n") {
			if l != "" {
				b.WriteString("# " + l + "\n")
			}
		}
		b.WriteString(s.dockerfileStep(arch) + "\n")
	}
	if docker && len(img.Expose) > 0 {
		ports := make([]string, len(img.Expose))
		for i, p := range img.Expose {
			ports[i] = strconv.Itoa(p)
		}
		b.WriteString("\nEXPOSE " + strings.Join(ports, " ") + "\n")
	}
	if docker && len(img.Cmd) > 0 {
		cmd, _ := json.Marshal(img.Cmd) // a []string always marshals
		b.WriteString("CMD " + strings.ReplaceAll(string(cmd), `","`, `", "`) + "\n")
	}
	return b.String()
}

func (img Image) hasBinary() bool {
	for _, s := range img.Steps {
		if s.Kind == KindBinary {
			return true
		}
	}
	return false
}

// Commands are the Dockerfile commands after FROM for a builder that takes them one
// line each (Modal's DockerfileCommands): a binary step becomes a download from
// urls[name], and is left out without one (the image then lacks that binary, as a
// Modal image without published binaries did before). A copy step has no files to
// copy from there: an error.
func (img Image) Commands(urls map[string]string) ([]string, error) {
	var cmds []string
	for i, s := range img.Steps {
		switch s.Kind {
		case KindCopy:
			return nil, fmt.Errorf("step %d: %s: a copy step needs a build context", i+1, s.Canonical())
		case KindBinary:
			if u := strings.TrimSpace(urls[s.Name]); u != "" {
				dst := BinaryPath(s.Name)
				cmds = append(cmds, "RUN curl -fsSL "+shellQuote(u)+" -o "+dst+" && chmod 755 "+dst)
			}
		default:
			cmds = append(cmds, s.Canonical())
		}
	}
	return cmds, nil
}

// shellQuote single-quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
