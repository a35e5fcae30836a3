package provider

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func items(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`{"name":"cmd-%d","command":"echo %d"}`, i, i))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func itemsWant(n int) []ServiceCommand {
	out := []ServiceCommand{}
	for i := range n {
		out = append(out, ServiceCommand{Name: fmt.Sprintf("cmd-%d", i), Command: fmt.Sprintf("echo %d", i)})
	}
	return out
}

func TestParseServiceCommands(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []ServiceCommand
	}{
		{"null", `null`, []ServiceCommand{}},
		{"undefined", ``, []ServiceCommand{}},
		{"string", `"string"`, []ServiceCommand{}},
		{"42", `42`, []ServiceCommand{}},
		{"object", `{}`, []ServiceCommand{}},
		{"empty array", `[]`, []ServiceCommand{}},
		{"two valid", `[{"name":"dev","command":"pnpm dev"},{"name":"css","command":"pnpm tailwind --watch","cwd":"frontend"}]`,
			[]ServiceCommand{{Name: "dev", Command: "pnpm dev"}, {Name: "css", Command: "pnpm tailwind --watch", Cwd: "frontend"}}},
		{"no name", `[{"command":"pnpm dev"}]`, []ServiceCommand{}},
		{"no command", `[{"name":"dev"}]`, []ServiceCommand{}},
		{"empty name", `[{"name":"","command":"pnpm dev"}]`, []ServiceCommand{}},
		{"empty command", `[{"name":"dev","command":""}]`, []ServiceCommand{}},
		{"11 items", items(11), []ServiceCommand{}},
		{"exactly 10 items", items(10), itemsWant(10)},
		{"name of 65 bytes", `[{"name":"` + strings.Repeat("n", 65) + `","command":"x"}]`, []ServiceCommand{}},
		{"name of 100 bytes", `[{"name":"` + strings.Repeat("n", 100) + `","command":"x"}]`, []ServiceCommand{}},
		{"name of 64 bytes", `[{"name":"` + strings.Repeat("n", 64) + `","command":"x"}]`, []ServiceCommand{{Name: strings.Repeat("n", 64), Command: "x"}}},
		{"name with a space (the sidecar refuses it)", `[{"name":"dev server","command":"x"}]`, []ServiceCommand{}},
		{"name ..", `[{"name":"..","command":"x"}]`, []ServiceCommand{}},
		{"command of 1001 chars", `[{"name":"x","command":"` + strings.Repeat("c", 1001) + `"}]`, []ServiceCommand{}},
		{"null cwd fails the whole list", `[{"name":"a","command":"b"},{"name":"dev","command":"x","cwd":null}]`, []ServiceCommand{}},
		{"empty cwd is valid", `[{"name":"dev","command":"x","cwd":""}]`, []ServiceCommand{{Name: "dev", Command: "x"}}},
		{"unknown keys stripped", `[{"name":"dev","command":"x","extra":1}]`, []ServiceCommand{{Name: "dev", Command: "x"}}},
		{"non-object element", `[{"name":"dev","command":"x"},3]`, []ServiceCommand{}},
		{"number name", `[{"name":1,"command":"x"}]`, []ServiceCommand{}},
		{"non-ASCII name", `[{"name":"😀","command":"x"}]`, []ServiceCommand{}},
		// 500 emoji are 1000 UTF-16 units (valid), 501 are 1002 (invalid).
		{"command length in UTF-16 units ok", `[{"name":"x","command":"` + strings.Repeat("😀", 500) + `"}]`, []ServiceCommand{{Name: "x", Command: strings.Repeat("😀", 500)}}},
		{"command length in UTF-16 units too long", `[{"name":"x","command":"` + strings.Repeat("😀", 501) + `"}]`, []ServiceCommand{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseServiceCommands(json.RawMessage(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseServiceCommands(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseConfigurationServiceCommands(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []ConfigurationServiceCommand
	}{
		{"null", `null`, []ConfigurationServiceCommand{}},
		{"undefined", ``, []ConfigurationServiceCommand{}},
		{"string", `"string"`, []ConfigurationServiceCommand{}},
		{"object", `{}`, []ConfigurationServiceCommand{}},
		{"empty array", `[]`, []ConfigurationServiceCommand{}},
		{"with workspacePath and cwd", `[{"name":"dev","command":"pnpm dev","workspacePath":"frontend"},{"name":"api","command":"pnpm start","workspacePath":"backend","cwd":"src"}]`,
			[]ConfigurationServiceCommand{{Name: "dev", Command: "pnpm dev", WorkspacePath: "frontend"}, {Name: "api", Command: "pnpm start", WorkspacePath: "backend", Cwd: "src"}}},
		{"without workspacePath", `[{"name":"dev","command":"pnpm dev"}]`, []ConfigurationServiceCommand{{Name: "dev", Command: "pnpm dev"}}},
		{"11 items", items(11), []ConfigurationServiceCommand{}},
		{"null workspacePath", `[{"name":"dev","command":"x","workspacePath":null}]`, []ConfigurationServiceCommand{}},
		{"workspacePath of 501 chars", `[{"name":"dev","command":"x","workspacePath":"` + strings.Repeat("w", 501) + `"}]`, []ConfigurationServiceCommand{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseConfigurationServiceCommands(json.RawMessage(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseConfigurationServiceCommands(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestResolveServiceCommands(t *testing.T) {
	tests := []struct {
		name  string
		cfg   string
		repos []RepoSpec
		want  []ConfigurationServiceCommand
	}{
		{"configuration wins", `[{"name":"dev","command":"pnpm dev","workspacePath":"frontend"}]`,
			[]RepoSpec{{WorkspacePath: "frontend", ServiceCommands: []ServiceCommand{{Name: "old", Command: "npm start"}}}},
			[]ConfigurationServiceCommand{{Name: "dev", Command: "pnpm dev", WorkspacePath: "frontend"}}},
		{"null falls back to repo commands", `null`,
			[]RepoSpec{{WorkspacePath: "frontend", ServiceCommands: []ServiceCommand{{Name: "dev", Command: "pnpm dev"}, {Name: "css", Command: "pnpm css:watch", Cwd: "styles"}}}},
			[]ConfigurationServiceCommand{{Name: "dev", Command: "pnpm dev", WorkspacePath: "frontend"}, {Name: "css", Command: "pnpm css:watch", Cwd: "styles", WorkspacePath: "frontend"}}},
		{"empty list falls back", `[]`,
			[]RepoSpec{{WorkspacePath: ".", ServiceCommands: []ServiceCommand{{Name: "dev", Command: "pnpm dev"}}}},
			[]ConfigurationServiceCommand{{Name: "dev", Command: "pnpm dev", WorkspacePath: "."}}},
		{"two repos in order", `null`,
			[]RepoSpec{{WorkspacePath: "frontend", ServiceCommands: []ServiceCommand{{Name: "fe-dev", Command: "pnpm dev"}}},
				{WorkspacePath: "backend", ServiceCommands: []ServiceCommand{{Name: "be-dev", Command: "uv run app"}}}},
			[]ConfigurationServiceCommand{{Name: "fe-dev", Command: "pnpm dev", WorkspacePath: "frontend"}, {Name: "be-dev", Command: "uv run app", WorkspacePath: "backend"}}},
		{"no repos", `null`, []RepoSpec{}, []ConfigurationServiceCommand{}},
		{"repo without commands", `null`, []RepoSpec{{WorkspacePath: "."}}, []ConfigurationServiceCommand{}},
		{"not an array falls back", `"not-an-array"`,
			[]RepoSpec{{WorkspacePath: ".", ServiceCommands: []ServiceCommand{{Name: "dev", Command: "pnpm dev"}}}},
			[]ConfigurationServiceCommand{{Name: "dev", Command: "pnpm dev", WorkspacePath: "."}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ResolveServiceCommands(json.RawMessage(tt.cfg), tt.repos)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ResolveServiceCommands(%q) mismatch (-want +got):\n%s", tt.cfg, diff)
			}
		})
	}
}

func FuzzParseServiceCommands(f *testing.F) {
	f.Add(`[{"name":"dev","command":"pnpm dev","cwd":"x"}]`)
	f.Add(`null`)
	f.Add(`[{"name":"","command":""}]`)
	f.Fuzz(func(t *testing.T, in string) {
		got := ParseServiceCommands(json.RawMessage(in))
		if len(got) > MaxServiceCommands {
			t.Fatalf("ParseServiceCommands(%q) returned %d commands", in, len(got))
		}
		for _, c := range got {
			if rules.ValidateName(c.Name) != nil || c.Command == "" || utf16Len(c.Command) > MaxServiceCommandLen || utf16Len(c.Cwd) > MaxServiceCwdLen {
				t.Fatalf("ParseServiceCommands(%q) accepted %+v", in, c)
			}
		}
		// A validated list re-encodes to a list that validates to itself.
		b, _ := json.Marshal(got)
		if diff := cmp.Diff(got, ParseServiceCommands(b)); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
	})
}

// Names of 65–100 bytes passed the old host-side validator (100 UTF-16 units)
// and then failed at the sidecar. Both sides now refuse them with one rule.
func TestServiceNameLimitMatchesSidecar(t *testing.T) {
	for n := rules.MaxNameLen + 1; n <= 100; n++ {
		name := strings.Repeat("a", n)
		if got := ParseServiceCommands(json.RawMessage(`[{"name":"` + name + `","command":"x"}]`)); len(got) != 0 {
			t.Errorf("ParseServiceCommands accepted a %d-byte name", n)
		}
		if rules.ValidateName(name) == nil {
			t.Errorf("rules.ValidateName accepted a %d-byte name", n)
		}
	}
}
