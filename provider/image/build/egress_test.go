package build

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestURLHost(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://deb.debian.org/debian", "deb.debian.org"},
		{"https://Registry.NPMJS.org/", "registry.npmjs.org"},
		{"http://mirror.example:3142/debian", "mirror.example"},
		{"ftp://ftp.debian.org/debian", ""},
		{"file:///srv/mirror", ""},
		{"deb.debian.org", ""},
		{"", ""},
	} {
		if got := urlHost(tc.in); got != tc.want {
			t.Errorf("urlHost(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNPMRegistry(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, want string }{
		{"none", "fund=false\n", ""},
		{"set", "registry=https://npm.example.com/\n", "https://npm.example.com/"},
		{"spaces and the last wins", " registry = https://a.example/\nregistry=https://b.example/\n", "https://b.example/"},
		{"scoped is not the registry", "@corp:registry=https://corp.example/\n", ""},
	} {
		f := filepath.Join(dir, tc.name)
		if err := os.WriteFile(f, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := npmRegistry(f); got != tc.want {
			t.Errorf("npmRegistry(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := npmRegistry(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("npmRegistry(missing) = %q", got)
	}
}

// The default list holds the standard mirrors, sorted and without repeats.
func TestDefaultEgressHosts(t *testing.T) {
	t.Setenv("NPM_CONFIG_REGISTRY", "https://npm.example.com/")
	got := DefaultEgressHosts()
	for _, h := range append(slices.Clone(StandardMirrors), "npm.example.com") {
		if !slices.Contains(got, h) {
			t.Errorf("DefaultEgressHosts() = %q, want it to hold %q", got, h)
		}
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("DefaultEgressHosts() = %q, want sorted without repeats", got)
	}
}
