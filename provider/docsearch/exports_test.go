package docsearch

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestExports(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		decls bool
		want  []Export
	}{
		{"function with doc", "/** Adds two numbers. */\nexport function add(a: number, b: number): number {\n  return a + b;\n}\n", false,
			[]Export{{Name: "add", Kind: "function", Signature: "export function add(a: number, b: number): number", Doc: "Adds two numbers."}}},
		{"const arrow", "export const parse = (s: string): number => {\n  return 1;\n};\n", false,
			[]Export{{Name: "parse", Kind: "const", Signature: "export const parse"}}},
		{"typed const", "export const f: (a: number) => void = () => {};\n", false,
			[]Export{{Name: "f", Kind: "const", Signature: "export const f: (a: number) => void"}}},
		{"interface", "export interface Issue {\n  id: string;\n  title: string;\n}\n", false,
			[]Export{{Name: "Issue", Kind: "interface", Signature: "export interface Issue"}}},
		{"class generic", "export class Client<T extends object> extends Base {\n  get(id: string): T { return {} as T }\n}\n", false,
			[]Export{{Name: "Client", Kind: "class", Signature: "export class Client<T extends object> extends Base"}}},
		{"type alias", "export type Unit = 'ms' | 's';\n", false,
			[]Export{{Name: "Unit", Kind: "type", Signature: "export type Unit = 'ms' | 's'"}}},
		{"not exported", "function hidden() {}\nconst x = 1;\n", false, nil},
		{"declarations", "declare function ms(value: string): number;\ndeclare namespace ms { interface Options { long: boolean } }\nexport = ms;\n", true,
			[]Export{{Name: "ms", Kind: "function", Signature: "declare function ms(value: string): number"},
				{Name: "ms", Kind: "namespace", Signature: "declare namespace ms"},
				{Name: "default", Kind: "default", Signature: "export = ms"}}},
		{"declare ignored outside declarations", "declare const x: number;\n", false, nil},
		{"reexport", "export * from './client';\nexport { a, b } from \"./util\";\n", false,
			[]Export{{Name: "./client", Kind: "reexport", Signature: "export * from './client'"},
				{Name: "./util", Kind: "reexport", Signature: "export { a, b } from \"./util\""}}},
		{"braces in strings and comments", "export const s = \"{\"; // }\nexport function g() { return `${'}'}` }\n", false,
			[]Export{{Name: "s", Kind: "const", Signature: "export const s"}, {Name: "g", Kind: "function", Signature: "export function g()"}}},
		{"async and default", "export default async function main() {}\nexport async function run() {}\n", false,
			[]Export{{Name: "main", Kind: "function", Signature: "export default async function main()"},
				{Name: "run", Kind: "function", Signature: "export async function run()"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Exports(tt.src, tt.decls)
			for i := range got {
				got[i].Text = ""
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Exports(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestChunkDeclarations(t *testing.T) {
	src := "/**\n * Parse or format the given `val`.\n */\ndeclare function ms(val: string): number;\nexport * from './x';\n"
	got := ChunkDeclarations(src)
	if len(got) != 1 || got[0].Title != "function ms" || !strings.Contains(got[0].Content, "Parse or format") ||
		!strings.Contains(got[0].Content, "declare function ms(val: string): number;") {
		t.Errorf("ChunkDeclarations(%q) = %+v, want one chunk of ms with its doc", src, got)
	}
}

// FuzzExports: any source (a package's or a model's) scans without panicking, and
// every export is bounded valid text.
func FuzzExports(f *testing.F) {
	for _, s := range []string{"export function f() {}", "/** d */ export const x = `${`{`}`;", "declare module 'x' { }",
		"export { a }", "export default {", "'unclosed\nexport class C {}", "/* open"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, src string, decls bool) {
		for _, e := range Exports(src, decls) {
			if len(e.Text) > maxExportText || len(e.Signature) > 500 || e.Kind == "" {
				t.Fatalf("export out of bounds: %+v", e)
			}
			if utf8.ValidString(src) && (!utf8.ValidString(e.Text) || !utf8.ValidString(e.Signature)) {
				t.Fatalf("export cut inside a rune: %+v", e)
			}
		}
	})
}
