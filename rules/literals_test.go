package rules_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestNoRuleLiterals walks the syntax of every non-test Go file of the module outside
// package rules and fails on a literal that spells a rule again: a sandbox path, an
// environment variable's name (the sandbox's, from rules, or the host side's, from
// provider/hostenv.go), or a port of the sandbox as a number or in an address. Such a
// value must come from its one home, so a change of the rule is one edit.
func TestNoRuleLiterals(t *testing.T) {
	paths := []string{rules.HomeDir, rules.StateDir, rules.SandboxMCPBin, rules.ProliferateBin,
		rules.EnvOverridesFile, rules.PreviewURLFile}
	envs := append(rules.EnvNames(), provider.HostEnvNames()...)
	ports := []int{rules.PortSidecar, rules.PortPreview, rules.PortPreviewProxy, rules.PortVSCode,
		rules.PortOpenCode, rules.PortEgressProxy, rules.PortCaddyAdmin, rules.PortSandboxDaemon}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || p == filepath.Join(root, "rules")) {
				return filepath.SkipDir
			}
			return nil
		}
		if p == filepath.Join(root, "provider", "hostenv.go") {
			return nil // the host side's names are spelled there
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if testOnly(f) {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok {
				return true
			}
			rel, _ := filepath.Rel(root, fset.Position(lit.Pos()).Filename)
			at := rel + ":" + strconv.Itoa(fset.Position(lit.Pos()).Line)
			switch lit.Kind {
			case token.STRING:
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				if why := ruleIn(s, paths, envs, ports); why != "" {
					t.Errorf("%s: literal %s spells %s; use its one home (package rules, provider/hostenv.go)", at, lit.Value, why)
				}
			case token.INT:
				v, err := strconv.Atoi(lit.Value)
				if err == nil && v != rules.PortOpenCode && contains(ports, v) {
					t.Errorf("%s: literal %s is a sandbox port; use package rules", at, lit.Value)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ruleIn says which rule s spells, or "".
func ruleIn(s string, paths, envs []string, ports []int) string {
	for _, p := range paths {
		if s == p || strings.HasPrefix(s, p+"/") || strings.Contains(s, " "+p) || strings.Contains(s, "="+p) {
			return "the path " + p
		}
	}
	for _, e := range envs {
		if s == e || strings.HasPrefix(s, e+"=") {
			return "the variable " + e
		}
	}
	for _, p := range ports {
		n := strconv.Itoa(p)
		for _, form := range []string{":" + n, "localhost:" + n} {
			if s == form || strings.HasSuffix(s, "127.0.0.1"+form) || strings.HasSuffix(s, "0.0.0.0"+form) || s == "localhost"+form {
				return "the port " + n
			}
		}
		// A port in an address inside a longer string ("localhost:2019/config"),
		// or as fuser and ss spell it ("4000/tcp").
		for _, form := range []string{"localhost:" + n, "127.0.0.1:" + n, n + "/tcp", n + "/udp"} {
			if i := strings.Index(s, form); i >= 0 && !digitAt(s, i+len(form)) && !digitAt(s, i-1) {
				return "the port " + n
			}
		}
	}
	return ""
}

// digitAt reports whether s has a decimal digit at index i.
func digitAt(s string, i int) bool { return i >= 0 && i < len(s) && s[i] >= '0' && s[i] <= '9' }

// testOnly reports files of test-helper packages (their package name ends in "test").
func testOnly(f *ast.File) bool { return strings.HasSuffix(f.Name.Name, "test") }

func contains(xs []int, v int) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}
