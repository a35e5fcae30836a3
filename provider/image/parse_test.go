package image_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/image"
)

func TestParseCommands(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmds []string
		want image.Image // From is always "debian:bookworm-slim"
		err  bool
	}{
		{"run", []string{"RUN apt-get update && \\\n    apt-get install -y jq"},
			image.Image{Steps: []image.Step{image.Run("apt-get update &&     apt-get install -y jq")}}, false},
		{"run exec form", []string{`RUN ["echo", "it's"]`}, image.Image{Steps: []image.Step{image.Run(`'echo' 'it'\''s'`)}}, false},
		{"lowercase", []string{"run true"}, image.Image{Steps: []image.Step{image.Run("true")}}, false},
		{"env pairs", []string{`ENV A=1 B="x \"y\" \$z" C='$lit'`}, image.Image{Steps: []image.Step{image.Env("A", "1", "B", `x "y" $z`, "C", "$lit")}}, false},
		{"env legacy", []string{"ENV GREETING hello world"}, image.Image{Steps: []image.Step{image.Env("GREETING", "hello world")}}, false},
		{"env variable", []string{"ENV PATH=$PATH:/x"}, image.Image{}, true},
		{"env unclosed", []string{`ENV A="x`}, image.Image{}, true},
		{"workdir user", []string{"WORKDIR /srv", "USER user"}, image.Image{Steps: []image.Step{image.WorkDir("/srv"), image.User("user")}}, false},
		{"workdir relative", []string{"WORKDIR srv"}, image.Image{}, true},
		{"expose cmd", []string{"EXPOSE 80 443/tcp", `CMD ["sleep", "1"]`}, image.Image{Expose: []int{80, 443}, Cmd: []string{"sleep", "1"}}, false},
		{"cmd shell", []string{"CMD sleep 1"}, image.Image{Cmd: []string{"/bin/sh", "-c", "sleep 1"}}, false},
		{"comments", []string{"# hi", "  ", "RUN true"}, image.Image{Steps: []image.Step{image.Run("true")}}, false},
		{"copy", []string{"COPY a /a"}, image.Image{}, true},
		{"arg", []string{"ARG X=1"}, image.Image{}, true},
		{"run mount", []string{"RUN --mount=type=cache,target=/x true"}, image.Image{}, true},
		{"heredoc", []string{"RUN <<EOF\necho\nEOF"}, image.Image{}, true},
		{"udp", []string{"EXPOSE 53/udp"}, image.Image{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := image.ParseCommands("debian:bookworm-slim", tc.cmds)
			if tc.err {
				if !errors.Is(err, image.ErrInvalid) {
					t.Errorf("ParseCommands(%q) = %v, want ErrInvalid", tc.cmds, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCommands(%q) = %v", tc.cmds, err)
			}
			tc.want.From = "debian:bookworm-slim"
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ParseCommands(%q) (-want +got):\n%s", tc.cmds, d)
			}
		})
	}
}

// The default image's Modal commands (binaries by URL) parse back to the same steps,
// apt steps as the run steps they render to.
func TestParseCommandsOfDefault(t *testing.T) {
	img := image.Default()
	cmds, err := img.Commands(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := image.ParseCommands(img.From, cmds)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := got.Commands(nil)
	if d := cmp.Diff(cmds, again); d != "" {
		t.Errorf("commands after a parse (-want +got):\n%s", d)
	}
}

// FuzzParseCommands: what parses renders to commands that parse to the same image.
func FuzzParseCommands(f *testing.F) {
	f.Add("RUN a && b\nENV A=\"x y\" B='$'\nWORKDIR /w\nUSER 1000\nEXPOSE 80\nCMD [\"x\"]")
	f.Add("ENV K v w\nRUN [\"a\",\"b c\"]")
	f.Fuzz(func(t *testing.T, text string) {
		img, err := image.ParseCommands("debian:bookworm", strings.Split(text, "\n"))
		if err != nil {
			return
		}
		cmds, err := img.Commands(nil)
		if err != nil {
			t.Fatal(err)
		}
		again, err := image.ParseCommands("debian:bookworm", cmds)
		if err != nil {
			t.Fatalf("ParseCommands(%q) of rendered commands = %v", cmds, err)
		}
		if d := cmp.Diff(img.Steps, again.Steps); d != "" {
			t.Fatalf("steps changed through a render (-first +second):\n%s", d)
		}
	})
}
