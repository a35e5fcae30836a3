// The REPL server of provider/coderun. It runs under `deno run` with narrow permissions
// inside the session's sandbox and evaluates TypeScript snippets like a REPL: the value
// of the last expression (awaited) comes back as JSON, and top-level declarations persist
// between snippets as globals. It listens on 127.0.0.1:<port> (the only port its
// --allow-net adds) and answers one JSON line per request line, one request at a time.
import { transform } from "sucrase";
import * as acorn from "acorn";

const port = Number(Deno.args[0]);
const workspace = Deno.args[1] ?? "/workspace";
const maxOutput = 1 << 20;

// Acorn nodes, loosely typed.
// deno-lint-ignore no-explicit-any
type Node = any;

function collectNames(p: Node, out: Set<string>) {
  if (!p) return;
  switch (p.type) {
    case "Identifier": out.add(p.name); break;
    case "ObjectPattern": for (const q of p.properties) collectNames(q.type === "RestElement" ? q.argument : q.value, out); break;
    case "ArrayPattern": for (const q of p.elements) collectNames(q, out); break;
    case "RestElement": collectNames(p.argument, out); break;
    case "AssignmentPattern": collectNames(p.left, out); break;
  }
}

function walk(n: Node, f: (n: Node) => void) {
  if (!n || typeof n !== "object") return;
  if (Array.isArray(n)) { for (const c of n) walk(c, f); return; }
  if (typeof n.type === "string") f(n);
  for (const k in n) {
    if (k !== "loc" && n[k] && typeof n[k] === "object") walk(n[k], f);
  }
}

function specifier(s: string): string {
  if (s.startsWith("./") || s.startsWith("../") || s.startsWith("/")) {
    return new URL(s, "file://" + workspace.replace(/\/?$/, "/")).href;
  }
  return s;
}

function importText(n: Node): string {
  const src = JSON.stringify(specifier(n.source.value));
  const parts: string[] = [];
  let ns = "";
  for (const s of n.specifiers) {
    if (s.type === "ImportNamespaceSpecifier") ns = s.local.name;
    else if (s.type === "ImportDefaultSpecifier") parts.push(`default: ${s.local.name}`);
    else parts.push(`${JSON.stringify(s.imported.name ?? s.imported.value)}: ${s.local.name}`);
  }
  if (ns && parts.length) return `${ns} = await import(${src}); void ({${parts.join(", ")}} = ${ns});`;
  if (ns) return `${ns} = await import(${src});`;
  if (parts.length) return `void ({${parts.join(", ")}} = await import(${src}));`;
  return `await import(${src});`;
}

// rewrite turns a snippet into a script whose completion is a promise of the value of
// its last expression, with top-level declarations turned into global assignments.
export function rewrite(ts: string): string {
  const parse = (src: string) => acorn.parse(src, { ecmaVersion: "latest", sourceType: "module", allowAwaitOutsideFunction: true }) as Node;
  let js = transform(ts, { transforms: ["typescript"], disableESTransforms: true, keepUnusedImports: true }).code;
  // Dynamic imports of relative paths resolve against /workspace, not this script.
  const patches: Node[] = [];
  walk(parse(js), (n) => {
    if (n.type === "ImportExpression" && n.source.type === "Literal" && typeof n.source.value === "string") patches.push(n.source);
  });
  for (const p of patches.sort((a, b) => b.start - a.start)) {
    js = js.slice(0, p.start) + JSON.stringify(specifier(p.value)) + js.slice(p.end);
  }
  const ast = parse(js);
  const names = new Set<string>();
  const hoisted: string[] = [];
  const body: string[] = [];
  const text = (n: Node) => js.slice(n.start, n.end);
  const stmts: Node[] = ast.body;
  stmts.forEach((n0: Node, i: number) => {
    let n = n0;
    if (n.type === "ExportNamedDeclaration" && n.declaration) n = n.declaration;
    else if (n.type === "ExportNamedDeclaration" || n.type === "ExportDefaultDeclaration" || n.type === "ExportAllDeclaration") {
      throw new SyntaxError("export is not supported here: save modules under /workspace and import them");
    }
    switch (n.type) {
      case "ImportDeclaration":
        for (const s of n.specifiers) names.add(s.local.name);
        hoisted.push(importText(n));
        return;
      case "FunctionDeclaration":
        names.add(n.id.name);
        hoisted.push(`${n.id.name} = ${text(n)};`);
        return;
      case "ClassDeclaration":
        names.add(n.id.name);
        body.push(`${n.id.name} = ${text(n)};`);
        return;
      case "VariableDeclaration": {
        const parts: string[] = [];
        for (const d of n.declarations) {
          collectNames(d.id, names);
          if (d.init) parts.push(`(${text(d.id)} = ${text(d.init)})`);
        }
        body.push(parts.length ? `void (${parts.join(", ")});` : ";");
        return;
      }
      case "ExpressionStatement":
        if (i === stmts.length - 1) {
          body.push(`return (${text(n.expression)});`);
          return;
        }
    }
    body.push(text(n));
  });
  const decl = names.size ? `var ${[...names].join(", ")};\n` : "";
  return `${decl}(async () => {\n${hoisted.join("\n")}\n${body.join("\n")}\n})()`;
}

// Output of console.* during a request.
let out = "";
function emit(args: unknown[]) {
  if (out.length > maxOutput) return;
  out += args.map((a) => typeof a === "string" ? a : Deno.inspect(a, { colors: false, depth: 6 })).join(" ") + "\n";
  if (out.length > maxOutput) out = out.slice(0, maxOutput) + "\n[output truncated]\n";
}
for (const k of ["log", "info", "debug", "warn", "error", "trace"] as const) {
  console[k] = (...args: unknown[]) => emit(args);
}

function errorText(e: unknown): string {
  if (e instanceof SyntaxError) return `SyntaxError: ${e.message}`;
  if (e instanceof Error) {
    const where = (e.stack ?? "").split("\n").slice(1, 4).filter((l) => !/\/repl\.(ts|js)\b/.test(l)).join("\n");
    return `${e.name}: ${e.message}` + (where ? "\n" + where : "");
  }
  return "Uncaught " + Deno.inspect(e, { colors: false });
}

function serialize(v: unknown): unknown {
  if (v === undefined) return undefined;
  try {
    const s = JSON.stringify(v, (_k, x) => typeof x === "bigint" ? x.toString() : x);
    if (s !== undefined) return JSON.parse(s);
  } catch { /* not JSON: fall through */ }
  return Deno.inspect(v, { colors: false, depth: 6 });
}

async function run(code: string) {
  out = "";
  try {
    const script = rewrite(code);
    const value = await (0, eval)(script);
    return { success: true, result: serialize(value), stdout: out };
  } catch (e) {
    return { success: false, error: errorText(e), stdout: out };
  }
}

globalThis.addEventListener("unhandledrejection", (ev) => {
  ev.preventDefault();
  emit(["Unhandled rejection: " + errorText(ev.reason)]);
});

let queue = Promise.resolve();
const enc = new TextEncoder();
async function serve(conn: Deno.Conn) {
  const lines = conn.readable.pipeThrough(new TextDecoderStream()).pipeThrough(splitLines());
  const w = conn.writable.getWriter();
  try {
    for await (const line of lines) {
      if (!line.trim()) continue;
      const req = JSON.parse(line);
      if (req.op === "hello") {
        await w.write(enc.encode(JSON.stringify({ pid: Deno.pid }) + "\n"));
        continue;
      }
      const res = await (queue = queue.then(() => run(String(req.code ?? ""))) as Promise<unknown>);
      await w.write(enc.encode(JSON.stringify(res) + "\n"));
    }
  } catch { /* the client went away */ }
  try { w.releaseLock(); conn.close(); } catch { /* closed */ }
}

function splitLines() {
  let buf = "";
  return new TransformStream<string, string>({
    transform(chunk, c) {
      buf += chunk;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) { c.enqueue(buf.slice(0, i)); buf = buf.slice(i + 1); }
    },
    flush(c) { if (buf) c.enqueue(buf); },
  });
}

const listener = Deno.listen({ hostname: "127.0.0.1", port });
for await (const conn of listener) serve(conn);
