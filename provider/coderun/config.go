package coderun

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch/hrana"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Config is the `[sandbox]` section of the platform's TOML configuration. The zero
// Config is off.
type Config struct {
	// Enabled turns the feature on; off means no tools and no prompt addendum.
	Enabled bool
	// Provider is local, modal or e2b (default local); "deno" is accepted for the
	// default engine and loads as local.
	Provider string
	// Region, when set, is where the engine places sandboxes on an engine that has
	// regions (see RegionalEngine); elsewhere it is ignored with a warning.
	Region string
	// Mode is lazy (sandbox on the first run_code, the default) or warm (with the session).
	Mode string
	// Image is the base image (a name or id in the engine's image store) the dependency
	// snapshot is built on when the engine boots images. Empty means image.DefaultFrom,
	// the sandbox image's base, when the store has it (else a copy snapshot); set, it
	// must be there or, for debian:<suite>[-slim], be buildable with mmdebstrap. An
	// engine without images ignores it.
	Image string
	// VolumeTTL: a session volume unused this long is deleted (default 30 min).
	VolumeTTL time.Duration
	// VolumeCapacityMB is a session volume's capacity (default 300; 16 MB to 1 TB, the
	// engines' bounds). A host-directory volume (an engine without volumes) has none.
	VolumeCapacityMB int
	// Timeout bounds one run_code (default 300 s).
	Timeout time.Duration
	// MemoryMB is the JavaScript heap of the code and, with headroom, the sandbox's
	// memory limit (default 1280).
	MemoryMB int
	// Dependencies are the npm packages code may import, with their docs and secrets.
	Dependencies []Dependency
	// Embeddings, when set, makes search_docs hybrid (BM25 + vectors).
	Embeddings *Embeddings
	// StorageURL, when set, puts the search index (doc_chunks, code_modules,
	// session_volumes) on a libSQL server or Turso database (libsql://host,
	// https://… or http://…) instead of the SQLite file in the data directory.
	StorageURL string
	// StorageTokenEnv names the host environment variable holding StorageURL's auth
	// token; StorageToken is its value, read at load.
	StorageTokenEnv string
	StorageToken    Secret
	// OutputBudgetKB bounds what one run_code returns of stdout, result and error
	// together, in KiB of JSON (0 means DefaultOutputBudgetKB; at most 1024): past it
	// the model gets a head and a tail, the sizes, and where the whole is kept.
	OutputBudgetKB int
	// Typecheck runs `deno check` on each snippet before running it (a call may
	// override it).
	Typecheck bool
}

// Dependency is one `[[sandbox.dependencies]]`.
type Dependency struct {
	// Package is the npm package name, e.g. @linear/sdk.
	Package string
	// Version is an npm version or range (default "latest").
	Version string
	// Docs are indexed for search_docs besides the package's own README and type
	// declarations: markdown URLs (http or https), files, or folders (their markdown,
	// text and .d.ts files). LoadFile makes a relative path relative to the
	// configuration file.
	Docs []string
	// SecretEnv names the host environment variable holding the package's secret. The
	// code sees a placeholder under the same name, never the value: the engine's egress
	// proxy puts the value in the placeholder's place on requests to Hosts only (an
	// engine that cannot, such as Modal or E2B without an egress gateway, refuses the
	// session's sandbox). Hosts are required with it.
	SecretEnv string
	// Secret is SecretEnv's value, read from the host environment at load.
	Secret Secret
	// Hosts are the host names the code may reach for this package; with SecretEnv,
	// only while the secret is set.
	Hosts []string
}

// Embeddings configure an OpenAI-compatible /v1/embeddings endpoint.
type Embeddings struct {
	URL    string
	Model  string
	KeyEnv string
	Key    Secret
}

// Secret is a value that never prints: fmt, slog and JSON show "[redacted]".
type Secret string

// String redacts.
func (Secret) String() string { return "[redacted]" }

// GoString redacts.
func (Secret) GoString() string { return "[redacted]" }

// LogValue redacts.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MarshalJSON redacts.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// Value is the secret itself.
func (s Secret) Value() string { return string(s) }

// Defaults of Config.
const (
	DefaultVolumeTTL        = 30 * time.Minute
	DefaultVolumeCapacityMB = 300
	DefaultTimeout          = 300 * time.Second
	DefaultMemoryMB         = 1280
	DefaultOutputBudgetKB   = rules.CoderunOutputBudgetKB
)

// fileConfig is the TOML shape.
type fileConfig struct {
	Sandbox *struct {
		Enabled          bool   `toml:"enabled"`
		Provider         string `toml:"provider"`
		Region           string `toml:"region"`
		Mode             string `toml:"mode"`
		Image            string `toml:"image"`
		VolumeTTLMinutes *int   `toml:"volume_ttl_minutes"`
		VolumeCapacityMB *int   `toml:"volume_capacity_mb"`
		TimeoutSeconds   *int   `toml:"timeout_seconds"`
		MemoryMB         *int   `toml:"memory_mb"`
		Dependencies     []struct {
			Package   string   `toml:"package"`
			Version   string   `toml:"version"`
			Docs      []string `toml:"docs"`
			SecretEnv string   `toml:"secret_env"`
			Hosts     []string `toml:"hosts"`
		} `toml:"dependencies"`
		Embeddings *struct {
			URL    string `toml:"url"`
			Model  string `toml:"model"`
			KeyEnv string `toml:"key_env"`
		} `toml:"embeddings"`
		StorageURL      string `toml:"storage_url"`
		StorageTokenEnv string `toml:"storage_token_env"`
		OutputBudgetKB  *int   `toml:"output_budget_kb"`
		Typecheck       bool   `toml:"typecheck"`
	} `toml:"sandbox"`
}

// LoadFile reads the configuration file at path (see Parse).
func LoadFile(path string, getenv func(string) string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load sandbox config: %w", err)
	}
	c, err := parse(b, getenv, filepath.Dir(path))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads the `[sandbox]` section of a TOML document, fills defaults, reads the
// secrets from getenv and validates. A document without the section, or with
// enabled = false, is the zero (off) Config. Other sections are ignored; unknown keys
// inside `[sandbox]` are errors. A relative docs path is relative to the working
// directory.
func Parse(data []byte, getenv func(string) string) (Config, error) {
	return parse(data, getenv, "")
}

// parse is Parse with relative docs paths made relative to dir.
func parse(data []byte, getenv func(string) string, dir string) (Config, error) {
	var fc fileConfig
	md, err := toml.Decode(string(data), &fc)
	if err != nil {
		return Config{}, fmt.Errorf("parse sandbox config: %w", err)
	}
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == "sandbox" {
			return Config{}, fmt.Errorf("sandbox config: unknown key %q", k.String())
		}
	}
	s := fc.Sandbox
	if s == nil || !s.Enabled {
		return Config{}, nil
	}
	c := Config{Enabled: true, Provider: s.Provider, Region: s.Region, Mode: s.Mode, Image: s.Image,
		VolumeTTL: DefaultVolumeTTL, VolumeCapacityMB: DefaultVolumeCapacityMB, Timeout: DefaultTimeout, MemoryMB: DefaultMemoryMB}
	if c.Provider == "" || c.Provider == "deno" {
		// "deno" names the runtime, not an engine: the default engine runs it.
		c.Provider = "local"
	}
	if c.Mode == "" {
		c.Mode = "lazy"
	}
	var errs []error
	positive := func(name string, v *int, set func(int)) {
		if v == nil {
			return
		}
		if *v <= 0 {
			errs = append(errs, fmt.Errorf("%s = %d: must be positive", name, *v))
			return
		}
		set(*v)
	}
	positive("volume_ttl_minutes", s.VolumeTTLMinutes, func(v int) { c.VolumeTTL = time.Duration(v) * time.Minute })
	positive("volume_capacity_mb", s.VolumeCapacityMB, func(v int) { c.VolumeCapacityMB = v })
	positive("timeout_seconds", s.TimeoutSeconds, func(v int) { c.Timeout = time.Duration(v) * time.Second })
	positive("memory_mb", s.MemoryMB, func(v int) { c.MemoryMB = v })
	for _, d := range s.Dependencies {
		dep := Dependency{Package: d.Package, Version: d.Version, SecretEnv: d.SecretEnv, Hosts: d.Hosts}
		for _, u := range d.Docs {
			if !isDocsURL(u) && dir != "" && u != "" && !filepath.IsAbs(u) {
				u = filepath.Join(dir, u)
			}
			dep.Docs = append(dep.Docs, u)
		}
		if dep.Version == "" {
			dep.Version = "latest"
		}
		if dep.SecretEnv != "" && getenv != nil {
			dep.Secret = Secret(getenv(dep.SecretEnv))
		}
		c.Dependencies = append(c.Dependencies, dep)
	}
	if e := s.Embeddings; e != nil {
		c.Embeddings = &Embeddings{URL: e.URL, Model: e.Model, KeyEnv: e.KeyEnv}
		if e.KeyEnv != "" && getenv != nil {
			c.Embeddings.Key = Secret(getenv(e.KeyEnv))
		}
	}
	c.Typecheck = s.Typecheck
	positive("output_budget_kb", s.OutputBudgetKB, func(v int) { c.OutputBudgetKB = v })
	c.StorageURL, c.StorageTokenEnv = s.StorageURL, s.StorageTokenEnv
	if c.StorageTokenEnv != "" && getenv != nil {
		c.StorageToken = Secret(getenv(c.StorageTokenEnv))
	}
	errs = append(errs, c.validate()...)
	errs = append(errs, c.validateStorage()...)
	if len(errs) == 0 {
		errs = append(errs, c.validateSecrets()...)
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("sandbox config: %w", errors.Join(errs...))
	}
	return c, nil
}

var (
	// npmName is an npm package name, scoped or not.
	npmName = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	// npmVersion is a version, range or dist-tag, without spaces or URLs.
	npmVersion = regexp.MustCompile(`^[A-Za-z0-9.^~<>=*|+_-]+$`)
	// imageRef is an image name or id of an image store.
	imageRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@-]*$`)
	envName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// region is a region name as engines spell them (ord, us-east-1, eu-west).
	region   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	hostName = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// validate checks a filled Config.
func (c Config) validate() []error {
	var errs []error
	if !slices.Contains([]string{"local", "modal", "e2b"}, c.Provider) {
		errs = append(errs, fmt.Errorf("provider %q: want local, modal, e2b or deno (the default engine)", c.Provider))
	}
	if c.Region != "" && !region.MatchString(c.Region) {
		errs = append(errs, fmt.Errorf("region %q: want a region name such as ord or us-east-1", c.Region))
	}
	if c.Mode != "lazy" && c.Mode != "warm" {
		errs = append(errs, fmt.Errorf("mode %q: want lazy or warm", c.Mode))
	}
	if c.Image != "" && (!imageRef.MatchString(c.Image) || len(c.Image) > 255) {
		errs = append(errs, fmt.Errorf("image %q: want an image name or id (letters, digits and ._-:/@)", c.Image))
	}
	if c.MemoryMB < 128 {
		errs = append(errs, fmt.Errorf("memory_mb = %d: at least 128", c.MemoryMB))
	}
	if c.OutputBudgetKB > 1024 {
		errs = append(errs, fmt.Errorf("output_budget_kb = %d: at most 1024", c.OutputBudgetKB))
	}
	if lo, hi := rules.MinVolumeBytes>>20, rules.MaxVolumeBytes>>20; c.VolumeCapacityMB < lo || c.VolumeCapacityMB > hi {
		errs = append(errs, fmt.Errorf("volume_capacity_mb = %d: want %d..%d", c.VolumeCapacityMB, lo, hi))
	}
	seen := map[string]bool{}
	for i, d := range c.Dependencies {
		where := fmt.Sprintf("dependencies[%d]", i)
		switch {
		case d.Package == "":
			errs = append(errs, fmt.Errorf("%s: package is required", where))
		case len(d.Package) > 214 || !npmName.MatchString(d.Package) || strings.Contains(d.Package, ".."):
			errs = append(errs, fmt.Errorf("%s: package %q is not an npm package name", where, d.Package))
		case seen[d.Package]:
			errs = append(errs, fmt.Errorf("%s: package %q is listed twice", where, d.Package))
		}
		seen[d.Package] = true
		if !npmVersion.MatchString(d.Version) {
			errs = append(errs, fmt.Errorf("%s: version %q is not an npm version or range", where, d.Version))
		}
		for _, u := range d.Docs {
			if err := checkDocs(u); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
		}
		if d.SecretEnv != "" && !envName.MatchString(d.SecretEnv) {
			errs = append(errs, fmt.Errorf("%s: secret_env %q is not an environment variable name", where, d.SecretEnv))
		}
		if d.SecretEnv != "" && len(d.Hosts) == 0 {
			// The sandbox holds a placeholder that only the egress proxy turns into the
			// value, on requests to these hosts: without one the secret is useless.
			errs = append(errs, fmt.Errorf("%s: secret_env %q without hosts: name the hosts its value is sent to (hosts = [\"api.example.com\"])", where, d.SecretEnv))
		}
		for _, h := range d.Hosts {
			if len(h) > 253 || !hostName.MatchString(h) {
				errs = append(errs, fmt.Errorf("%s: host %q: want a lowercase host name (or *.domain), without scheme or port", where, h))
			}
		}
	}
	if e := c.Embeddings; e != nil {
		if p, err := url.Parse(e.URL); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("embeddings: url %q: want http(s)://host", e.URL))
		}
		if e.Model == "" {
			errs = append(errs, errors.New("embeddings: model is required"))
		}
		if e.KeyEnv != "" && !envName.MatchString(e.KeyEnv) {
			errs = append(errs, fmt.Errorf("embeddings: key_env %q is not an environment variable name", e.KeyEnv))
		}
	}
	return errs
}

// isDocsURL reports whether a docs entry is a URL rather than a path.
func isDocsURL(s string) bool { return strings.Contains(s, "://") }

// checkDocs checks a docs entry: an http(s) URL, or a file or folder that exists (a
// typo fails at start, not as a silently missing document).
func checkDocs(s string) error {
	if isDocsURL(s) {
		if p, err := url.Parse(s); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("docs URL %q: want http(s)://host/path, or a file or folder path", s)
		}
		return nil
	}
	if s == "" || strings.ContainsRune(s, 0) {
		return fmt.Errorf("docs %q: want an http(s) URL, or a file or folder path", s)
	}
	if _, err := os.Stat(s); err != nil {
		return fmt.Errorf("docs path %q: %w", s, err)
	}
	return nil
}

// validateStorage checks storage_url and storage_token_env: a URL hrana accepts, and a
// token variable that is set (a storage whose token is missing would fail on every
// search; say so at start).
func (c Config) validateStorage() []error {
	var errs []error
	if c.StorageURL != "" {
		if _, err := hrana.ParseURL(c.StorageURL); err != nil {
			errs = append(errs, fmt.Errorf("storage_url: %w", err))
		}
	}
	switch {
	case c.StorageTokenEnv == "":
	case c.StorageURL == "":
		errs = append(errs, errors.New("storage_token_env is set without storage_url"))
	case !envName.MatchString(c.StorageTokenEnv):
		errs = append(errs, fmt.Errorf("storage_token_env %q is not an environment variable name", c.StorageTokenEnv))
	case c.StorageToken == "":
		errs = append(errs, fmt.Errorf("storage_token_env: %s is not set in the environment", c.StorageTokenEnv))
	}
	return errs
}

// AllowedHosts are the hosts code may reach: those of dependencies without a secret,
// and of dependencies whose secret is set. Sorted, without duplicates.
func (c Config) AllowedHosts() []string {
	var hs []string
	for _, d := range c.Dependencies {
		if d.SecretEnv != "" && d.Secret == "" {
			continue
		}
		hs = append(hs, d.Hosts...)
	}
	slices.Sort(hs)
	return slices.Compact(hs)
}

// secrets are the dependencies' secrets that are set, as the Spec.Secrets of a session's
// sandbox: one per secret_env name (a name several dependencies share gets all their
// hosts), sorted by name. Inside the sandbox each name holds the engine's placeholder;
// the engine's egress proxy puts the value in its place on requests to the hosts.
func (c Config) secrets() []engine.Secret {
	var out []engine.Secret
	for _, d := range c.Dependencies {
		if d.SecretEnv == "" || d.Secret == "" {
			continue
		}
		i := slices.IndexFunc(out, func(s engine.Secret) bool { return s.Name == d.SecretEnv })
		if i < 0 {
			out = append(out, engine.Secret{Name: d.SecretEnv, Value: d.Secret.Value()})
			i = len(out) - 1
		}
		out[i].Hosts = append(out[i].Hosts, d.Hosts...)
	}
	for i := range out {
		slices.Sort(out[i].Hosts)
		out[i].Hosts = slices.Compact(out[i].Hosts)
	}
	slices.SortFunc(out, func(a, b engine.Secret) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// secretNames are the names of secrets(): the only environment code may read.
func (c Config) secretNames() []string {
	var names []string
	for _, s := range c.secrets() {
		names = append(names, s.Name)
	}
	return names
}

// validateSecrets checks the values of the secrets that are set as the engine's
// egress proxy will (egress.NewSecrets): a value it would refuse fails at start, not
// at the first run_code.
func (c Config) validateSecrets() []error {
	var errs []error
	for _, s := range c.secrets() {
		if _, err := egress.NewSecrets([]engine.Secret{s}); err != nil {
			errs = append(errs, fmt.Errorf("secret_env %s: %w", s.Name, err))
		}
	}
	return errs
}

// PromptAddendum is the system-prompt addendum for the model: the packages and how to
// use the tools. Empty when the feature is off.
func (c Config) PromptAddendum() string {
	if !c.Enabled {
		return ""
	}
	var pkgs []string
	for _, d := range c.Dependencies {
		pkgs = append(pkgs, d.Package)
	}
	list := "none (the Deno standard library only)"
	if len(pkgs) > 0 {
		list = strings.Join(pkgs, ", ")
	}
	return "You can run TypeScript in a sandbox. Packages available by name: " + list + ".\n" +
		"Call `search_docs` before writing code that uses a package, to read its documentation.\n" +
		"Call `run_code` to execute: the value of the last expression comes back as JSON, console.log goes to stdout, and variables persist between calls.\n" +
		"Save reusable modules under /workspace and declare them with `save_code_modules` so later calls can find and import them.\n" +
		"Network access is limited to the packages' API hosts; their credentials are in the environment (Deno.env.get) as stand-ins that work only in requests to those hosts.\n"
}

// outputBudget is OutputBudgetKB in bytes, the default filled in.
func (c Config) outputBudget() int {
	if c.OutputBudgetKB <= 0 {
		return DefaultOutputBudgetKB << 10
	}
	return c.OutputBudgetKB << 10
}
