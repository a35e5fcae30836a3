package modalserver

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseBuildSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmds []string
		want buildSteps
	}{
		{"none", nil, buildSteps{}},
		{"env pairs", []string{`ENV A=1 B="two words" C='x y'`}, buildSteps{env: []string{"A=1", "B=two words", "C=x y"}}},
		{"env legacy", []string{"ENV DEBIAN_FRONTEND noninteractive"}, buildSteps{env: []string{"DEBIAN_FRONTEND=noninteractive"}}},
		{"env escape", []string{`ENV P=a\ b`}, buildSteps{env: []string{"P=a b"}}},
		{"workdir", []string{"WORKDIR /home/user", "WORKDIR app"}, buildSteps{workdir: "/home/user/app"}},
		{"no-ops", []string{"ARG X=1", "LABEL a=b", "EXPOSE 80", "# comment", ""}, buildSteps{}},
		{"run", []string{"RUN apt-get install -y git", "COPY . /app", "env lower=case"},
			buildSteps{env: []string{"lower=case"}, unrun: []string{"RUN apt-get install -y git", "COPY . /app"}}},
	} {
		got := parseBuildSteps(tc.cmds)
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(buildSteps{})); diff != "" {
			t.Errorf("%s: parseBuildSteps(%q) (-want +got):\n%s", tc.name, tc.cmds, diff)
		}
	}
}

// FuzzParseBuildSteps: any command list parses without panic; every env entry is
// KEY=VALUE with a key, and a RUN line is never taken as applied.
func FuzzParseBuildSteps(f *testing.F) {
	for _, s := range []string{`ENV A="b c" D=e`, "RUN x", "WORKDIR a", `ENV K 'v`, `ENV \`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		b := parseBuildSteps([]string{cmd})
		for _, kv := range b.env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				t.Errorf("env entry %q from %q", kv, cmd)
			}
		}
		if op, _, _ := strings.Cut(strings.TrimSpace(cmd), " "); strings.EqualFold(op, "RUN") && len(b.unrun) != 1 {
			t.Errorf("RUN line %q not reported unrun: %+v", cmd, b)
		}
	})
}
