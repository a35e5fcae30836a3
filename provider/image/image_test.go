package image_test

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func TestGolden(t *testing.T) {
	img := image.Default()
	if err := img.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	cmds, err := img.Commands(map[string]string{"sandbox-mcp": "https://example.invalid/sandbox-mcp"})
	if err != nil {
		t.Fatal(err)
	}
	// The default Dockerfile's golden file is deploy/Dockerfile (deploy's test).
	for _, tc := range []struct{ name, got string }{
		{"e2b.Dockerfile", img.E2BDockerfile()},
		{"modal-commands.txt", strings.Join(cmds, "\n") + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.Golden(t, filepath.Join("testdata", tc.name), []byte(tc.got), *update)
		})
	}
}

// The rules' folders are the host side's (provider.Paths): one layout.
func TestPathsMatchProvider(t *testing.T) {
	p := provider.DefaultPaths()
	for _, tc := range []struct{ name, rule, host string }{
		{"home", rules.HomeDir, p.Home},
		{"workspace", rules.WorkspaceDir, p.Workspace()},
		{"plugin", rules.GlobalPluginDir, p.GlobalPluginDir()},
		{"tools", rules.PreinstalledToolsDir, p.PreinstalledToolsDir()},
		{"caddy admin", rules.CaddyAdminDir, p.CaddyAdminDir()},
		{"caddy socket", rules.CaddyAdminSocket, p.CaddyAdminSocket()},
		{"sandbox-mcp", image.BinaryPath("sandbox-mcp"), rules.SandboxMCPBin},
		{"proliferate", image.BinaryPath("proliferate"), rules.ProliferateBin},
	} {
		if tc.rule != tc.host {
			t.Errorf("%s: rules %q, provider.Paths %q", tc.name, tc.rule, tc.host)
		}
	}
}

func TestDefaultHasWhatTheBootNeeds(t *testing.T) {
	df := image.Default().Dockerfile()
	for _, want := range []string{"git", "caddy", "bash", "curl", "ca-certificates", "procps", "sudo", "openssh-server", "jq",
		"--uid 1000", "/home/user/workspace", "/home/user/.proliferate/caddy/admin", "/usr/local/bin/sandbox-mcp", "/usr/local/bin/proliferate"} {
		if !strings.Contains(df, want) {
			t.Errorf("default Dockerfile lacks %q", want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := func(s image.Step) image.Image { return image.Image{From: "debian:bookworm", Steps: []image.Step{s}} }
	for _, tc := range []struct {
		name  string
		img   image.Image
		valid bool
	}{
		{"default", image.Default(), true},
		{"no from", image.Image{}, false},
		{"from with space", image.Image{From: "a b"}, false},
		{"apt", ok(image.Apt("git", "libc6:amd64", "caddy=2.6.2-5")), true},
		{"apt empty", ok(image.Apt()), false},
		{"apt injection", ok(image.Apt("git; rm -rf /")), false},
		{"apt option", ok(image.Apt("-y")), false},
		{"run", ok(image.Run("echo hi", "true")), true},
		{"run empty", ok(image.Run()), false},
		{"run blank", ok(image.Run(" ")), false},
		{"run newline", ok(image.Run("echo a\nRUN evil")), false},
		{"env", ok(image.Env("A", "x y $z")), true},
		{"env bad key", ok(image.Env("1A", "x")), false},
		{"env newline", ok(image.Env("A", "x\nRUN evil")), false},
		{"workdir", ok(image.WorkDir("/home/user")), true},
		{"workdir relative", ok(image.WorkDir("home")), false},
		{"workdir unclean", ok(image.WorkDir("/a/../b")), false},
		{"user", ok(image.User("user")), true},
		{"uid", ok(image.User("1000")), true},
		{"user bad", ok(image.User("a b")), false},
		{"copy", ok(image.Copy("files/x", "/etc/x")), true},
		{"copy escape", ok(image.Copy("../x", "/etc/x")), false},
		{"copy absolute", ok(image.Copy("/etc/shadow", "/x")), false},
		{"copy relative dst", ok(image.Copy("x", "x")), false},
		{"binary", ok(image.Binary("sandbox-mcp")), true},
		{"binary path", ok(image.Binary("../x")), false},
		{"unknown kind", ok(image.Step{Kind: "from"}), false},
		{"bad port", image.Image{From: "x", Expose: []int{0}}, false},
	} {
		err := tc.img.Validate()
		if (err == nil) != tc.valid {
			t.Errorf("%s: Validate() = %v, want valid %v", tc.name, err, tc.valid)
		}
		if err != nil && !errors.Is(err, image.ErrInvalid) {
			t.Errorf("%s: Validate() = %v, not ErrInvalid", tc.name, err)
		}
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		step image.Step
		want string
	}{
		{image.Apt("jq", "git", "jq"), "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git jq && rm -rf /var/lib/apt/lists/*"},
		{image.Run("a", "b"), "RUN a && b"},
		{image.Env("A", "1", "B", `x "y" $z`), `ENV A=1 B="x \"y\" \$z"`},
		{image.Env("E", ""), `ENV E=""`},
		{image.WorkDir("/w"), "WORKDIR /w"},
		{image.User("user"), "USER user"},
		{image.Copy("a/b", "/c"), "COPY a/b /c"},
		{image.Binary("proliferate"), "BINARY proliferate"},
	} {
		if got := tc.step.Canonical(); got != tc.want {
			t.Errorf("Canonical(%+v) = %q, want %q", tc.step, got, tc.want)
		}
	}
}

func TestCommandsRefuseCopy(t *testing.T) {
	img := image.Image{From: "x", Steps: []image.Step{image.Copy("a", "/a")}}
	if _, err := img.Commands(nil); err == nil {
		t.Error("Commands of a copy step = nil error, want one")
	}
}

func TestKeys(t *testing.T) {
	ctx := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctx, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := image.Sources{Context: ctx}
	base := image.Image{From: "debian:bookworm", Steps: []image.Step{
		image.Apt("git"), image.Copy("f", "/f"), image.Env("A", "1"), image.Run("true"),
	}}
	keys := func(img image.Image, from string) []string {
		t.Helper()
		k, err := img.Keys(from, src)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k0 := keys(base, base.From)
	if d := cmp.Diff(k0, keys(base, base.From)); d != "" {
		t.Errorf("keys are not stable (-first +second):\n%s", d)
	}
	// firstChanged is the index of the first step whose key changed; every later
	// key must change too.
	for _, tc := range []struct {
		name         string
		change       func(img *image.Image)
		from         string
		firstChanged int
	}{
		{"comment", func(img *image.Image) { img.Steps[2] = img.Steps[2].With("why") }, "", -1},
		{"base", func(*image.Image) {}, "sha256:other", 0},
		{"apt", func(img *image.Image) { img.Steps[0] = image.Apt("git", "jq") }, "", 0},
		{"env", func(img *image.Image) { img.Steps[2] = image.Env("A", "2") }, "", 2},
		{"run", func(img *image.Image) { img.Steps[3] = image.Run("false") }, "", 3},
		{"copied file", func(*image.Image) {
			if err := os.WriteFile(filepath.Join(ctx, "f"), []byte("two"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "", 1},
	} {
		img := base
		img.Steps = append([]image.Step(nil), base.Steps...)
		tc.change(&img)
		from := img.From
		if tc.from != "" {
			from = tc.from
		}
		k := keys(img, from)
		for i := range k {
			changed := k[i] != k0[i]
			if want := tc.firstChanged >= 0 && i >= tc.firstChanged; changed != want {
				t.Errorf("%s: key of step %d changed = %v, want %v", tc.name, i, changed, want)
			}
		}
	}
}

func TestBinaryKeyFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandbox-mcp")
	img := image.Image{From: "x", Steps: []image.Step{image.Binary("sandbox-mcp")}}
	key := func() string {
		t.Helper()
		k, err := img.Key("x", image.Sources{Binaries: map[string]string{"sandbox-mcp": bin}})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if err := os.WriteFile(bin, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	k1 := key()
	if err := os.WriteFile(bin, []byte("v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if key() == k1 {
		t.Error("a changed binary does not change the key")
	}
	if _, err := img.Key("x", image.Sources{Binaries: map[string]string{"sandbox-mcp": filepath.Join(dir, "missing")}}); err == nil {
		t.Error("Key with a missing binary = nil error")
	}
}

func TestParse(t *testing.T) {
	data, err := json.Marshal(image.Default())
	if err != nil {
		t.Fatal(err)
	}
	got, err := image.Parse(data)
	if err != nil {
		t.Fatalf("Parse(Default) = %v", err)
	}
	if d := cmp.Diff(image.Default(), got); d != "" {
		t.Errorf("Parse(Marshal(Default)) (-want +got):\n%s", d)
	}
	for _, bad := range []string{``, `{}`, `{"from":"x","steps":[{"kind":"run"}]}`, `{"from":"x","stepz":[]}`, `{"from":"x"} {}`} {
		if _, err := image.Parse([]byte(bad)); !errors.Is(err, image.ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	data, _ := json.Marshal(image.Default())
	f.Add(data)
	f.Add([]byte(`{"from":"x","steps":[{"kind":"env","env":[{"key":"A","value":"\"$"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := image.Parse(data)
		if err != nil {
			return
		}
		// A valid definition renders, and each rendered step stays on its own lines:
		// no value can smuggle in an instruction.
		df := img.Dockerfile()
		for _, l := range strings.Split(df, "\n") {
			if strings.HasPrefix(l, "FROM ") && l != "FROM "+img.From {
				t.Fatalf("a second FROM line %q in:\n%s", l, df)
			}
		}
		again, err := json.Marshal(img)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := image.Parse(again); err != nil {
			t.Fatalf("Parse(Marshal(valid)) = %v", err)
		}
	})
}
