package provider

import (
	"bytes"
	"encoding/json"
	"unicode/utf16"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ServiceCommand is a long-running command a repo declares (dev server, watcher).
type ServiceCommand struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Cwd is relative to the repo; empty means the repo itself (the old code treated an
	// empty cwd as absent too, so absent and "" are one value here).
	Cwd string `json:"cwd,omitempty"`
}

// ConfigurationServiceCommand is a ServiceCommand tagged with the repo it runs in.
type ConfigurationServiceCommand struct {
	Name          string `json:"name"`
	Command       string `json:"command"`
	Cwd           string `json:"cwd,omitempty"`
	WorkspacePath string `json:"workspacePath,omitempty"`
}

// Limits of service command validation. Lengths of the command, cwd and
// workspacePath count UTF-16 units, as the old validator did. A name follows the
// sidecar's rule (rules.ValidateName: 1–64 bytes of letters, digits, '.', '_',
// '-'), so the host never accepts a name the sidecar would refuse; the old
// validator allowed 100 UTF-16 units of anything.
const (
	MaxServiceCommands     = 10
	MaxServiceNameLen      = rules.MaxNameLen
	MaxServiceCommandLen   = 1000
	MaxServiceCwdLen       = 500
	MaxServiceWorkspaceLen = 500
)

// ParseServiceCommands validates untrusted JSON as a list of service commands. It never
// fails: anything but an array of at most MaxServiceCommands valid objects yields an
// empty list (all or nothing); unknown keys are dropped.
func ParseServiceCommands(raw json.RawMessage) []ServiceCommand {
	items, ok := parseServiceObjects(raw, false)
	if !ok {
		return []ServiceCommand{}
	}
	out := make([]ServiceCommand, len(items))
	for i, it := range items {
		out[i] = ServiceCommand{Name: it.Name, Command: it.Command, Cwd: it.Cwd}
	}
	return out
}

// ParseConfigurationServiceCommands is ParseServiceCommands for the configuration
// variant, which also accepts workspacePath.
func ParseConfigurationServiceCommands(raw json.RawMessage) []ConfigurationServiceCommand {
	items, ok := parseServiceObjects(raw, true)
	if !ok {
		return []ConfigurationServiceCommand{}
	}
	return items
}

// ResolveServiceCommands returns the configuration's commands when they validate to a
// non-empty list; otherwise the commands each repo declares, in repo order, tagged with
// the repo's workspacePath (repo commands are not validated again).
func ResolveServiceCommands(configurationCommands json.RawMessage, repos []RepoSpec) []ConfigurationServiceCommand {
	if cfg := ParseConfigurationServiceCommands(configurationCommands); len(cfg) > 0 {
		return cfg
	}
	out := []ConfigurationServiceCommand{}
	for _, r := range repos {
		for _, c := range r.ServiceCommands {
			out = append(out, ConfigurationServiceCommand{Name: c.Name, Command: c.Command, Cwd: c.Cwd, WorkspacePath: r.WorkspacePath})
		}
	}
	return out
}

func parseServiceObjects(raw json.RawMessage, withWorkspace bool) ([]ConfigurationServiceCommand, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil || len(elems) > MaxServiceCommands {
		return nil, false
	}
	out := make([]ConfigurationServiceCommand, 0, len(elems))
	for _, e := range elems {
		e = bytes.TrimSpace(e)
		if len(e) == 0 || e[0] != '{' {
			return nil, false
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(e, &obj); err != nil {
			return nil, false
		}
		var c ConfigurationServiceCommand
		var ok bool
		if c.Name, ok = stringField(obj, "name", true, 1, MaxServiceNameLen); !ok || rules.ValidateName(c.Name) != nil {
			return nil, false
		}
		if c.Command, ok = stringField(obj, "command", true, 1, MaxServiceCommandLen); !ok {
			return nil, false
		}
		if c.Cwd, ok = stringField(obj, "cwd", false, 0, MaxServiceCwdLen); !ok {
			return nil, false
		}
		if withWorkspace {
			if c.WorkspacePath, ok = stringField(obj, "workspacePath", false, 0, MaxServiceWorkspaceLen); !ok {
				return nil, false
			}
		}
		out = append(out, c)
	}
	return out, true
}

// stringField reads obj[key] as a JSON string whose UTF-16 length is within [min, max].
// An absent optional key is valid; a present key must be a string (null is not).
func stringField(obj map[string]json.RawMessage, key string, required bool, min, max int) (string, bool) {
	v, present := obj[key]
	if !present {
		return "", !required
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	n := utf16Len(s)
	return s, n >= min && n <= max
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
