package quickstart

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Size limits of non-test code, from the project's ground rules: a file or a
// function past them is split along its seams before it is merged.
const (
	maxFileLines = 500
	maxFuncLines = 100
)

// TestStyleSizes fails on every non-test Go file of the module over
// maxFileLines lines and every function (declaration, from the line of its
// opening brace to the line of its closing one) over maxFuncLines, naming each.
func TestStyleSizes(t *testing.T) {
	files := moduleGoFiles(t)
	if len(files) == 0 {
		t.Fatal("found no Go files in the module")
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		problems, err := sizeProblems(path, src)
		if err != nil {
			t.Error(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// sizeProblems names what of the Go source src, read from path, is over the
// size limits.
func sizeProblems(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var problems []string
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		problems = append(problems, fmt.Sprintf("%s: %d lines, want at most %d", path, n, maxFileLines))
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start := fset.Position(fd.Body.Lbrace)
		n := fset.Position(fd.Body.Rbrace).Line - start.Line + 1
		if n > maxFuncLines {
			problems = append(problems, fmt.Sprintf("%s:%d: func %s: %d lines, want at most %d", path, start.Line, funcName(fd), n, maxFuncLines))
		}
	}
	return problems, nil
}

// TestStyleSizeProblems checks the checker on made-up sources at and just
// past each limit, so TestStyleSizes passing means something.
func TestStyleSizeProblems(t *testing.T) {
	// fn is a function whose body, braces included, spans n lines.
	fn := func(recv, name string, n int) string {
		return "func " + recv + name + "() {\n" + strings.Repeat("\t_ = 0\n", n-2) + "}\n"
	}
	// file is a file of n lines holding no function.
	file := func(n int) string {
		return "package p\n" + strings.Repeat("\n", n-2) + "var x = 1\n"
	}
	tests := []struct {
		name, src string
		want      []string
	}{
		{"func at the limit", "package p\n" + fn("", "f", maxFuncLines), nil},
		{"func past the limit", "package p\n" + fn("", "f", maxFuncLines+1),
			[]string{"x.go:2: func f: 101 lines, want at most 100"}},
		{"method past the limit", "package p\ntype T struct{}\n" + fn("(t *T) ", "m", maxFuncLines+1),
			[]string{"x.go:3: func (T).m: 101 lines, want at most 100"}},
		{"generic method past the limit", "package p\ntype T[P any] struct{}\n" + fn("(t T[P]) ", "m", maxFuncLines+1),
			[]string{"x.go:3: func (T).m: 101 lines, want at most 100"}},
		{"file at the limit", file(maxFileLines), nil},
		{"file past the limit", file(maxFileLines + 1), []string{"x.go: 501 lines, want at most 500"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sizeProblems("x.go", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("sizeProblems = %q, want %q", got, tt.want)
			}
		})
	}
}

// funcName is fd's name, with its receiver type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr: // generic receiver T[P]
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return "(" + id.Name + ")." + fd.Name.Name
	}
	return fd.Name.Name
}

// moduleGoFiles lists the module's non-test Go files outside testdata and
// node_modules, relative to the module root: the files git tracks, or, in a
// tree that is not a git checkout, the files on disk.
func moduleGoFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	keep := func(path string) bool {
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return false
		}
		for _, dir := range strings.Split(filepath.ToSlash(filepath.Dir(path)), "/") {
			if dir == "testdata" || dir == "node_modules" || dir == ".git" {
				return false
			}
		}
		return true
	}
	out, err := exec.Command("git", "ls-files", "-z", "--", "*.go").Output()
	if err == nil {
		for _, p := range bytes.Split(out, []byte{0}) {
			// A file deleted but not yet committed is still listed.
			if path := string(p); keep(path) && fileExists(path) {
				files = append(files, path)
			}
		}
		return files
	}
	t.Logf("git ls-files: %v; walking the tree instead", err)
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", ".git":
				return filepath.SkipDir
			}
			// Another module's files are that module's business.
			if path != "." && fileExists(filepath.Join(path, "go.mod")) {
				return filepath.SkipDir
			}
			return nil
		}
		if keep(path) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
