package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ev := func(pkg, test, action, output string, elapsed string) string {
		s := `{"Time":"2026-01-01T00:00:00Z","Action":"` + action + `","Package":"` + pkg + `"`
		if test != "" {
			s += `,"Test":"` + test + `"`
		}
		if output != "" {
			s += `,"Output":` + output
		}
		if elapsed != "" {
			s += `,"Elapsed":` + elapsed
		}
		return s + "}\n"
	}
	tests := []struct {
		name     string
		args     []string
		stream   string
		code     int
		want     []string // in this order
		dontWant []string
	}{
		{
			name:   "passing packages",
			args:   []string{"-trim", "example.com/"},
			stream: read("pass.json"),
			code:   0,
			want: []string{"ok  \texample.com/tt\t",
				"--- test time per package", "ok    tt  TestPass 0.0s",
				"1 packages,", "--- the 2 slowest tests", "tt  TestPass"},
			dontWant: []string{"hidden", "TestSkip", "PASS\n", "=== RUN", "tt/empty  "},
		},
		{
			name:   "failures and a build error",
			args:   []string{"-trim", "example.com/"},
			stream: read("fail.json"),
			code:   1,
			want: []string{"c/c_test.go:3:27: undefined: undefined", "panic: boom", "FAIL\texample.com/tt/b\t",
				"FAIL\texample.com/tt/c [build failed]", "from main", "=== RUN   TestFail\n", "a_test.go:4: shown",
				"a_test.go:4: subfail", "--- FAIL: TestFail (", "FAIL\texample.com/tt\t",
				"FAIL  tt    TestFail 0.0s", "3 packages,"},
			dontWant: []string{"hidden", "TestFail/ok", "a_test.go:5: why"},
		},
		{
			name: "a package cut off",
			stream: ev("p", "", "start", "", "") + ev("p", "TestA", "run", "", "") +
				ev("p", "TestA", "output", `"=== RUN   TestA\n"`, "") + ev("p", "TestA", "output", `"    a_test.go:1: half way\n"`, "") +
				ev("p", "TestB", "output", `"=== RUN   TestB\n"`, "") + ev("p", "TestB", "pass", "", "0.5"),
			code:     1,
			want:     []string{"--- p: no result before the stream ended", "a_test.go:1: half way", "none  p  TestB 0.5s"},
			dontWant: []string{"=== RUN   TestB"},
		},
		{
			name:   "words of the go command pass through",
			stream: "go: downloading example.com/x v1.0.0\n" + ev("p", "", "output", `"ok  \tp\t1.5s\n"`, "") + ev("p", "", "pass", "", "1.5"),
			code:   0,
			want:   []string{"go: downloading example.com/x v1.0.0\n", "ok  \tp\t1.5s\n", "1.5s  ok    p\n"},
		},
		{
			name:     "parallel framing hidden in a failure",
			stream:   ev("p", "TestA", "output", `"=== PAUSE TestA\n"`, "") + ev("p", "TestA", "output", `"=== CONT  TestA\n"`, "") + ev("p", "TestA", "output", `"    boom\n"`, "") + ev("p", "TestA", "fail", "", "2") + ev("p", "", "fail", "", "2.1"),
			code:     1,
			want:     []string{"    boom\n", "2.1s  FAIL  p  TestA 2.0s"},
			dontWant: []string{"=== PAUSE", "=== CONT"},
		},
		{
			name:   "no result at all",
			stream: "",
			code:   1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(tt.stream), &stdout, &stderr)
			out := stdout.String()
			if code != tt.code {
				t.Errorf("run() = %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.code, out, stderr.String())
			}
			rest := out
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("output lacks %q (after the previous wants); output:\n%s", w, out)
					continue
				}
				rest = rest[i+len(w):]
			}
			for _, w := range tt.dontWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q; output:\n%s", w, out)
				}
			}
		})
	}
}

func TestTrim(t *testing.T) {
	stream := `{"Action":"output","Package":"example.com/m/a","Output":"ok\n"}` + "\n" +
		`{"Action":"pass","Package":"example.com/m/a","Elapsed":3}` + "\n"
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-trim", "example.com/m/", "-tests", "0"}, strings.NewReader(stream), &stdout, &stderr); code != 0 {
		t.Fatalf("run() = %d; stderr: %s", code, stderr.String())
	}
	if got := stdout.String(); !strings.Contains(got, "3.0s  ok    a\n") || strings.Contains(got, "example.com/m/a ") || strings.Contains(got, "slowest tests") {
		t.Errorf("run(-trim example.com/m/ -tests 0) wrote:\n%s\nwant the package as %q and no list of tests", got, "a")
	}
}
