package rules

// Code execution (provider/coderun): where its runtime lives inside a sandbox.
const (
	// CoderunDepsDir holds Deno, the package.json and node_modules of the configured
	// dependencies, and the REPL server; it is part of the dependency snapshot. Code
	// may read it, not write it.
	CoderunDepsDir = HomeDir + "/.coderun"
	// CoderunDeno is the Deno binary (the native one from the npm package `deno`).
	CoderunDeno = CoderunDepsDir + "/bin/deno"
	// CoderunREPLSource is the REPL server's TypeScript source.
	CoderunREPLSource = CoderunDepsDir + "/repl.ts"
	// CoderunREPL is the REPL server that runs: its source bundled with its packages
	// into one module (faster to load than the packages' many).
	CoderunREPL = CoderunDepsDir + "/repl.js"
	// CoderunDenoDir is DENO_DIR, Deno's cache.
	CoderunDenoDir = CoderunDepsDir + "/cache"
	// CoderunWorkspace is where the session's volume is mounted; code may read and
	// write it.
	CoderunWorkspace = "/workspace"
	// CoderunOutputDir, in the session's volume, keeps the whole stdout and result of
	// a run_code whose answer was cut to the output budget (the newest few).
	CoderunOutputDir = CoderunWorkspace + "/.coderun"
	// CoderunREPLLog receives the REPL server's stderr (V8's out-of-memory report).
	CoderunREPLLog = "/tmp/coderun-repl.log"
	// CoderunBuildCA holds the host's CA certificates in the sandbox that builds the
	// dependency snapshot from a slim image (for a TLS-inspecting proxy on the way to
	// the npm registry); /run is not part of a snapshot.
	CoderunBuildCA = "/run/coderun-host-ca.pem"
	// CoderunPkgDocsDir holds the script that reads the packages' README and type
	// declarations, and its Deno cache, while the docs are collected (in /run: never
	// part of a snapshot).
	CoderunPkgDocsDir = "/run/coderun-pkgdocs"
	// CoderunOutputBudgetKB is the default output budget of one tool answer to a
	// model, in KiB of JSON (search_docs; run_code has output_budget_kb).
	CoderunOutputBudgetKB = 16
	// PortCoderunREPL is the REPL server's loopback port inside the sandbox.
	PortCoderunREPL = 4790
)
