// The REPL server of provider/coderun. It runs under `deno run` with narrow permissions
// inside the session's sandbox and evaluates TypeScript snippets like a REPL: the value
// of the last expression (awaited) comes back as JSON, and top-level declarations persist
// between snippets as globals. It listens on 127.0.0.1:<port> (the only port its
// --allow-net adds) and answers each request line with zero or more {"stdout": …} lines
// (console output while the code runs, up to the budget) and one final JSON line, one
// request at a time.
//
// What the model sees is shaped here: errors name the line and column of the snippet
// (the rewrite keeps a map from the script it evaluates back to the snippet), permission
// errors say what the sandbox allows, and stdout and the result fit the output budget,
// with the whole of them kept in $stdout, $result and files under /workspace.
import { transform } from "sucrase";
import * as acorn from "acorn";

const port = Number(Deno.args[0]);
const workspace = (Deno.args[1] ?? "/workspace").replace(/\/$/, "");
// What the sandbox allows, for error messages: hosts, environment names, packages.
const allowed: { hosts: string[]; env: string[]; packages: string[] } = {
  hosts: [], env: [], packages: [], ...JSON.parse(Deno.args[2] || "{}"),
};
// The dependency directory (this script's), whose frames are ours and whose
// node_modules frames are the packages'.
const depsDir = new URL(".", import.meta.url).href;
// keepMax bounds the stdout kept in memory and in its file, and the result file.
const keepMax = 64 << 20;

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

// specifier resolves a snippet's import: paths against /workspace, with the file's
// modification time and size in the query so that an edited module is loaded again
// (a module's URL is its identity: the old version stays cached under the old URL).
function specifier(s: string): string {
  if (!(s.startsWith("./") || s.startsWith("../") || s.startsWith("/"))) return s;
  const u = new URL(s, "file://" + workspace + "/");
  try {
    const st = Deno.statSync(u);
    u.search = `v=${st.mtime?.getTime() ?? 0}-${st.size}`;
  } catch { /* missing: the import reports it */ }
  return u.href;
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

// A piece of the generated script: synthetic text, or a range of the stripped
// JavaScript copied verbatim. anchor is the JavaScript offset an error inside synthetic
// text is reported at (its statement's start).
type Piece = { text: string; from?: number; anchor: number };

// Rewritten is a snippet ready to evaluate, with what maps it back.
type Rewritten = { script: string; names: Set<string>; map: SourceMap };

// SourceMap maps a position of the evaluated script to the snippet's line and column.
class SourceMap {
  // segs: [scriptOffset, length, jsOffset, exact] sorted by scriptOffset.
  segs: [number, number, number, boolean][] = [];
  scriptLines: number[] = [];
  constructor(public ts: string, public js: string, script: string, pieces: Piece[]) {
    let off = 0;
    for (const p of pieces) {
      this.segs.push([off, p.text.length, p.from ?? p.anchor, p.from !== undefined]);
      off += p.text.length;
    }
    this.scriptLines = lineStarts(script);
  }
  // locate returns the snippet's 1-based line and column of a 1-based script position,
  // or undefined inside the REPL's own wrapper.
  locate(line: number, col: number): { line: number; col: number } | undefined {
    const off = (this.scriptLines[line - 1] ?? Infinity) + col - 1;
    let lo = 0, hi = this.segs.length - 1, seg: [number, number, number, boolean] | undefined;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = this.segs[mid];
      if (off < s[0]) hi = mid - 1;
      else if (off >= s[0] + s[1]) lo = mid + 1;
      else { seg = s; break; }
    }
    if (!seg || seg[2] < 0) return undefined;
    const jsOff = seg[3] ? seg[2] + off - seg[0] : seg[2];
    const starts = lineStarts(this.js);
    let l = 0;
    while (l + 1 < starts.length && starts[l + 1] <= jsOff) l++;
    const jsCol = jsOff - starts[l];
    // Type stripping keeps lines; columns move where types were removed: find the text
    // at the JavaScript column in the TypeScript line.
    const tsLine = this.ts.split("\n")[l] ?? "";
    const jsLine = this.js.split("\n")[l] ?? "";
    const probe = jsLine.slice(jsCol, jsCol + 12);
    let tsCol = jsCol;
    if (probe && tsLine.slice(jsCol, jsCol + probe.length) !== probe) {
      const i = tsLine.indexOf(probe, jsCol);
      if (i >= 0) tsCol = i;
    }
    return { line: l + 1, col: tsCol + 1 };
  }
  sourceLine(line: number): string {
    return this.ts.split("\n")[line - 1] ?? "";
  }
}

function lineStarts(s: string): number[] {
  const out = [0];
  for (let i = s.indexOf("\n"); i >= 0; i = s.indexOf("\n", i + 1)) out.push(i + 1);
  return out;
}

// rewrite turns a snippet into a script whose completion is a promise of the value of
// its last expression, with top-level declarations turned into global assignments.
export function rewrite(ts: string, name: string): Rewritten {
  const parse = (src: string) => {
    try {
      return acorn.parse(src, { ecmaVersion: "latest", sourceType: "module", allowAwaitOutsideFunction: true }) as Node;
    } catch (e) {
      // Type stripping keeps lines: the line is the snippet's, the column nearly.
      if (e instanceof SyntaxError && typeof (e as Node).pos === "number") ownSyntax.set(e, lineCol(src, (e as Node).pos));
      throw e;
    }
  };
  let js: string;
  try {
    js = transform(ts, { transforms: ["typescript"], disableESTransforms: true, keepUnusedImports: true }).code;
  } catch (e) {
    if (e instanceof SyntaxError && typeof (e as Node).pos === "number") ownSyntax.set(e, lineCol(ts, (e as Node).pos));
    throw e;
  }
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
  const hoisted: Piece[][] = [];
  const body: Piece[][] = [];
  const stmts: Node[] = ast.body;
  stmts.forEach((n0: Node, i: number) => {
    let n = n0;
    const at = n0.start;
    const syn = (text: string): Piece => ({ text, anchor: at });
    const copy = (m: Node): Piece => ({ text: js.slice(m.start, m.end), from: m.start, anchor: at });
    if (n.type === "ExportNamedDeclaration" && n.declaration) n = n.declaration;
    else if (n.type === "ExportNamedDeclaration" || n.type === "ExportDefaultDeclaration" || n.type === "ExportAllDeclaration") {
      const e = new SyntaxError("export is not supported here: save modules under /workspace and import them");
      ownSyntax.set(e, lineCol(js, n.start));
      throw e;
    }
    switch (n.type) {
      case "ImportDeclaration":
        for (const s of n.specifiers) names.add(s.local.name);
        hoisted.push([syn(importText(n))]);
        return;
      case "FunctionDeclaration":
        names.add(n.id.name);
        hoisted.push([syn(`${n.id.name} = `), copy(n), syn(";")]);
        return;
      case "ClassDeclaration":
        names.add(n.id.name);
        body.push([syn(`${n.id.name} = `), copy(n), syn(";")]);
        return;
      case "VariableDeclaration": {
        const parts: Piece[] = [];
        for (const d of n.declarations) {
          collectNames(d.id, names);
          if (!d.init) continue;
          parts.push(syn(parts.length ? ", (" : "void ((")), parts.push(copy(d.id), syn(" = "), copy(d.init), syn(")"));
        }
        body.push(parts.length ? [...parts, syn(");")] : [syn(";")]);
        return;
      }
      case "ExpressionStatement":
        if (i === stmts.length - 1) {
          body.push([syn("return ("), copy(n.expression), syn(");")]);
          return;
        }
    }
    body.push([copy(n)]);
  });
  const pieces: Piece[] = [];
  const wrap = (text: string) => pieces.push({ text, anchor: -1 });
  wrap((names.size ? `var ${[...names].join(", ")};\n` : "") + "(async () => {\n");
  for (const stmt of [...hoisted, ...body]) {
    pieces.push(...stmt);
    wrap("\n");
  }
  wrap(`})()\n//# sourceURL=${name}`);
  const script = pieces.map((p) => p.text).join("");
  return { script, names, map: new SourceMap(ts, js, script, pieces) };
}

// ownSyntax are the syntax errors of snippets, with where they are (0-based column).
const ownSyntax = new WeakMap<Error, { line: number; column: number }>();

function lineCol(s: string, off: number) {
  const before = s.slice(0, off);
  return { line: before.split("\n").length, column: off - (before.lastIndexOf("\n") + 1) };
}

// Snippets evaluated so far (their maps, for frames of functions they defined) and the
// global names they declared (for type-checking a later snippet).
const snippets = new Map<string, SourceMap>();
const maxSnippets = 500;
const declared = new Set<string>();
let seq = 0;

// --- errors ---

const frameRe = /^\s*at (?:(.+?) \()?(code-\d+\.ts), <anonymous>:(\d+):(\d+)\)?$/;

// errorText is an error as the model should read it: its message with permission errors
// reworded, the frames of the snippets mapped to their lines, the packages' and
// /workspace modules' frames kept, and the runtime's own dropped.
function errorText(e: unknown, current?: string): string {
  if (!(e instanceof Error)) return "Uncaught " + inspect(e);
  const head = `${e.name}: ${message(e)}`;
  const loc = ownSyntax.get(e);
  if (loc && current) {
    const line = loc.line, col = loc.column + 1;
    const src = snippets.get(current)?.sourceLine(line) ?? sourceOf(current, line);
    return `${e.name}: ${e.message.replace(/ \(\d+:\d+\)$/, "")}\n    at line ${line}, column ${col}` + excerpt(line, src);
  }
  const frames: string[] = [];
  let first: { line: number; src: string } | undefined;
  for (const raw of (e.stack ?? "").split("\n").slice(1)) {
    const m = frameRe.exec(raw);
    if (m) {
      const map = snippets.get(m[2]);
      const loc = map?.locate(Number(m[3]), Number(m[4]));
      if (!map || !loc) continue;
      const fn = m[1] && m[1] !== "eval" && m[1] !== "async eval" ? m[1].replace(/^async /, "") + " " : "";
      const where = `line ${loc.line}, column ${loc.col}` + (m[2] === current ? "" : " of an earlier call");
      frames.push(fn ? `    at ${fn}(${where})` : `    at ${where}`);
      if (!first && m[2] === current) first = { line: loc.line, src: map.sourceLine(loc.line) };
      continue;
    }
    if (!/^\s*at /.test(raw)) continue;
    if (raw.includes(depsDir + "repl.") || /\bext:|node:internal|\(<anonymous>\)$|^\s*at <anonymous>$/.test(raw)) continue;
    frames.push(raw.replace(depsDir + "node_modules/.deno/", "node_modules/").replace(/file:\/\/(\/[^:?)]*)\?v=[0-9-]+/g, "$1")
      .replace(/file:\/\//g, "").replace(/^\s*/, "    "));
  }
  let text = head + (frames.length ? "\n" + frames.slice(0, 12).join("\n") : "");
  if (first) text += excerpt(first.line, first.src);
  if (e.cause !== undefined) text += "\nCaused by: " + errorText(e.cause, current);
  return text;
}

function excerpt(line: number, src: string): string {
  return src.trim() ? `\n  ${line} | ${src.trimEnd().slice(0, 200)}` : "";
}

function sourceOf(name: string, line: number): string {
  return name === pendingName ? (pendingCode.split("\n")[line - 1] ?? "") : "";
}
let pendingName = "", pendingCode = "";

// message rewords Deno's permission and resolution errors, whose advice (a flag, deno
// add) is not the model's to follow, into what this sandbox allows.
function message(e: Error): string {
  const m = e.message;
  const list = (xs: string[]) => xs.length ? xs.join(", ") : "none";
  let r: RegExpExecArray | null;
  if ((r = /^Requires net access to "([^"]+)"/.exec(m))) {
    const host = r[1].replace(/:\d+$/, "").replace(/^\[|\]$/g, "");
    return `${JSON.stringify(host)} is not in this sandbox's hosts; code can reach only: ${list(allowed.hosts)}`;
  }
  if ((r = /^Requires env access to "([^"]+)"/.exec(m))) {
    return `the environment variable ${JSON.stringify(r[1])} is not available; code sees only the packages' secrets: ${list(allowed.env)}`;
  }
  if ((r = /^Requires env access/.exec(m))) {
    return `the environment is not available as a whole; read a secret by name (Deno.env.get): ${list(allowed.env)}`;
  }
  if ((r = /^Requires read access to "([^"]+)"/.exec(m))) {
    return `${JSON.stringify(r[1])} cannot be read; code reads files under ${workspace} (and the packages)`;
  }
  if ((r = /^Requires write access to "([^"]+)"/.exec(m))) {
    return `${JSON.stringify(r[1])} cannot be written; code writes files under ${workspace}`;
  }
  if (/^Requires run access/.test(m)) return "subprocesses cannot be started in this sandbox; do the work in TypeScript";
  if (/^Requires ffi access/.test(m)) return "native libraries (FFI) are not available in this sandbox";
  if ((r = /^Requires sys access to "([^"]+)"/.exec(m))) return `system information (${r[1]}) is not available in this sandbox`;
  if ((r = /^Requires import access to "([^"]+)"/.exec(m))) {
    return `imports from the network (${r[1]}) are not available; import the sandbox's packages by name: ${list(allowed.packages)}`;
  }
  if ((r = /^(?:Relative import path|Import) "([^"]+)" not (?:a dependency|prefixed)/.exec(m))) {
    return `${JSON.stringify(r[1])} is not one of this sandbox's packages (${list(allowed.packages)}); import files with ./ or ${workspace}/ paths`;
  }
  return m.replace(/,? run again with the --allow-\w+ flag/, "").replace(/\n\s*hint: .*/g, "");
}

function inspect(v: unknown): string {
  try {
    return Deno.inspect(v, { colors: false, depth: 6 });
  } catch {
    return String(v);
  }
}

// --- output ---

// cost is what a UTF-16 unit costs in the JSON the model receives (escapes included,
// with Go's HTML escaping of <, > and &): the budget is in those bytes.
function cost(c: number): number {
  if (c >= 0x20 && c < 0x7f) return c === 0x22 || c === 0x5c ? 2 : c === 0x3c || c === 0x3e || c === 0x26 ? 6 : 1;
  if (c < 0x20) return c === 0x0a || c === 0x09 || c === 0x0d ? 2 : 6;
  if (c < 0x800) return 2;
  if (c === 0x2028 || c === 0x2029) return 6;
  if (c >= 0xd800 && c <= 0xdfff) return 2;
  return 3;
}

// size is what s costs, counted up to a little past limit.
function size(s: string, limit = Infinity): number {
  let n = 0;
  for (let i = 0; i < s.length && n <= limit; i++) n += cost(s.charCodeAt(i));
  return n;
}

// cut returns the longest head (or tail) of s costing at most n, without splitting a
// surrogate pair.
function cut(s: string, n: number, tail = false): string {
  let i = 0, used = 0;
  const len = s.length;
  while (i < len) {
    const c = cost(s.charCodeAt(tail ? len - 1 - i : i));
    if (used + c > n) break;
    used += c;
    i++;
  }
  if (!tail) {
    if (i > 0 && i < len && (s.charCodeAt(i - 1) & 0xfc00) === 0xd800) i--;
    return s.slice(0, i);
  }
  if (i > 0 && i < len && (s.charCodeAt(len - i) & 0xfc00) === 0xdc00) i--;
  return s.slice(len - i);
}

// fit is a head and a tail of s (total bytes in all) costing at most n, around a note
// that says how much was left out and where the whole is.
function fit(s: string, total: number, n: number, where?: string): string {
  const note = (left: number) => `\n… [${group(left)} of ${group(total)} bytes left out here${where ? "; the whole is in " + where : ""}] …\n`;
  const room = Math.max(0, n - size(note(total)));
  const head = cut(s, Math.floor(room * 0.6));
  const tl = cut(s, room - size(head), true);
  return head + note(Math.max(0, total - utf8(head) - utf8(tl))) + tl;
}

function group(n: number): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

const enc = new TextEncoder();
function utf8(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : (c & 0xfc00) === 0xd800 ? 2 : (c & 0xfc00) === 0xdc00 ? 2 : 3;
  }
  return n;
}

// A call in progress: its console output (kept whole up to keepMax in memory, and in
// the live file), what was streamed, and the unhandled errors it caused.
type Call = {
  name: string;
  start: number;
  budget: number;
  prefix: string; // the kept files' path without extension; "" keeps none
  chunks: string[];
  kept: number; // UTF-16 units in chunks
  keptBytes: number; // their UTF-8 bytes
  bytes: number; // UTF-8 bytes of all output
  toFile: string[]; // output not yet in the live file
  toFileLen: number;
  fileBytes: number;
  lastWrite: number;
  fileErr?: string;
  streamLeft: number;
  pending: string;
  scheduled: boolean;
  send: (line: unknown) => void;
  uncaught: string[];
};

let cur: Call | undefined;
// Output and errors that arrive between calls (timers of an earlier call) go to the
// next call.
let late = "";

// The live file has the stdout of the call in progress, written as it is printed: its
// first line at once, then at least every 50 ms or 64 KB. When a timeout kills this
// process, what the call printed is there; a call whose stdout is cut to the budget
// moves it to <out>.stdout.txt.
let live: Deno.FsFile | undefined;
let livePath = "";
let liveDirty = false;

function emit(args: unknown[]) {
  const s = args.map((a) => typeof a === "string" ? a : inspect(a)).join(" ") + "\n";
  const c = cur;
  if (!c) {
    if (late.length < 1 << 16) late += s;
    return;
  }
  const b = utf8(s);
  c.bytes += b;
  if (c.kept < keepMax) {
    c.chunks.push(s);
    c.kept += s.length;
    c.keptBytes += b;
  }
  if (c.prefix && !c.fileErr && c.fileBytes < keepMax) {
    c.toFile.push(s);
    c.toFileLen += s.length;
    const now = performance.now();
    if (c.fileBytes === 0 || now - c.lastWrite > 50 || c.toFileLen > 1 << 16) writeLive(c, now);
  }
  if (c.streamLeft > 0) {
    const part = cut(s, c.streamLeft);
    c.streamLeft = part.length < s.length ? 0 : c.streamLeft - size(part);
    c.pending += part;
    if (!c.scheduled) {
      c.scheduled = true;
      queueMicrotask(() => flush(c));
    }
  }
}

function flush(c: Call) {
  c.scheduled = false;
  if (c.pending && c === cur) c.send({ stdout: c.pending });
  c.pending = "";
}

function writeLive(c: Call, now: number) {
  try {
    const path = dir(c.prefix) + "/stdout.live";
    if (!live || livePath !== path) {
      live?.close();
      live = undefined;
      Deno.mkdirSync(dir(path), { recursive: true });
      live = Deno.openSync(path, { write: true, create: true, truncate: true });
      livePath = path;
    }
    const b = enc.encode(c.toFile.length === 1 ? c.toFile[0] : c.toFile.join(""));
    c.toFile = [];
    c.toFileLen = 0;
    let off = 0;
    while (off < b.length) off += live.writeSync(b.subarray(off));
    c.fileBytes += b.length;
    c.lastWrite = now;
    liveDirty = true;
  } catch (e) {
    c.fileErr = e instanceof Error ? message(e) : String(e);
  }
}

// keepStdout moves the live file, completed, to <out>.stdout.txt: the whole stdout of
// a call whose answer has only its head and tail.
function keepStdout(c: Call): string | undefined {
  if (!c.prefix || c.fileErr) return undefined;
  writeLive(c, 0);
  if (c.fileErr || !live) return undefined;
  try {
    live.close();
    live = undefined;
    liveDirty = false;
    Deno.renameSync(livePath, c.prefix + ".stdout.txt");
    prune(dir(c.prefix));
    return c.prefix + ".stdout.txt";
  } catch (e) {
    c.fileErr = e instanceof Error ? message(e) : String(e);
    return undefined;
  }
}

// startLive empties the live file for a new call.
function startLive() {
  if (!live || !liveDirty) return;
  try {
    live.truncateSync(0);
    live.seekSync(0, Deno.SeekMode.Start);
    liveDirty = false;
  } catch {
    live = undefined;
  }
}

function dir(path: string) {
  return path.slice(0, path.lastIndexOf("/")) || "/";
}

// prune keeps the newest output files.
function prune(d: string) {
  try {
    const files = [...Deno.readDirSync(d)].filter((f) => f.isFile && /^out-/.test(f.name)).map((f) => f.name).sort();
    for (const f of files.slice(0, Math.max(0, files.length - 20))) Deno.removeSync(d + "/" + f);
  } catch { /* best effort */ }
}

for (const k of ["log", "info", "debug", "warn", "error", "trace", "dir", "table"] as const) {
  console[k] = (...args: unknown[]) => emit(args);
}

// --- results ---

// toJSON is compact JSON of v that says what JavaScript has and JSON has not: Map and
// Set, typed arrays, errors, bigints, non-finite numbers, functions; cycles are
// "[Circular]". undefined is absent at the top, null in arrays, skipped in objects.
function toJSON(v: unknown, current: string, seen = new Set<object>()): string | undefined {
  switch (typeof v) {
    case "string": return JSON.stringify(v);
    case "number": return Number.isFinite(v) ? JSON.stringify(v) : JSON.stringify(String(v));
    case "boolean": return String(v);
    case "bigint": return JSON.stringify(`${v}n`);
    case "undefined": return undefined;
    case "symbol": return JSON.stringify(v.toString());
    case "function": return JSON.stringify(`[Function: ${v.name || "anonymous"}]`);
  }
  if (v === null) return "null";
  const o = v as Record<string, unknown>;
  if (seen.has(o)) return '"[Circular]"';
  seen.add(o);
  try {
    const arr = (xs: Iterable<unknown>) => "[" + Array.from(xs, (x) => toJSON(x, current, seen) ?? "null").join(",") + "]";
    if (o instanceof Date) return JSON.stringify(isNaN(o.getTime()) ? "Invalid Date" : o.toISOString());
    if (o instanceof Map) return `{"$map":${arr(o.entries())}}`;
    if (o instanceof Set) return `{"$set":${arr(o.values())}}`;
    if (o instanceof Error) return `{"$error":${JSON.stringify(errorText(o, current))}}`;
    if (o instanceof ArrayBuffer) return `{"$ArrayBuffer":${o.byteLength}}`;
    if (ArrayBuffer.isView(o) && !(o instanceof DataView)) {
      return `{${JSON.stringify("$" + o.constructor.name)}:${arr(o as unknown as Iterable<unknown>)}}`;
    }
    if (o instanceof RegExp) return JSON.stringify(String(o));
    if (o instanceof Promise || o instanceof WeakMap || o instanceof WeakSet) return JSON.stringify(`[${o.constructor.name}]`);
    if (Array.isArray(o)) return arr(o);
    if (typeof o.toJSON === "function") return toJSON(o.toJSON(), current, seen);
    const parts: string[] = [];
    for (const k of Object.keys(o)) {
      const s = toJSON(o[k], current, seen);
      if (s !== undefined) parts.push(JSON.stringify(k) + ":" + s);
    }
    return "{" + parts.join(",") + "}";
  } finally {
    seen.delete(o);
  }
}

// --- running ---

// A port whose messages are a turn of the event loop without a timer's delay: the
// unhandled rejections of a call fire before its answer.
const tick = new MessageChannel();
let wake: (() => void) | undefined;
tick.port1.onmessage = () => {
  const w = wake;
  wake = undefined;
  w?.();
};
const turn = () => new Promise<void>((r) => { wake = r; tick.port2.postMessage(0); });

type Request = { code?: string; budget?: number; out?: string };

async function run(req: Request, send: (line: unknown) => void) {
  const code = String(req.code ?? "");
  const name = `code-${++seq}.ts`;
  const budget = Math.max(1024, Number(req.budget) || 16384);
  const c: Call = {
    name, start: performance.now(), budget, prefix: req.out ?? "", chunks: [], kept: 0, keptBytes: 0, bytes: 0,
    toFile: [], toFileLen: 0, fileBytes: 0, lastWrite: 0,
    streamLeft: budget, pending: "", scheduled: false, send, uncaught: [],
  };
  let earlier = "";
  if (late) {
    earlier = "[output after the previous call ended]\n" + late;
    late = "";
  }
  startLive();
  cur = c;
  pendingName = name, pendingCode = code;
  let value: unknown, error: string | undefined;
  try {
    const rw = rewrite(code, name);
    snippets.set(name, rw.map);
    if (snippets.size > maxSnippets) snippets.delete(snippets.keys().next().value!);
    for (const n of rw.names) declared.add(n);
    value = await (0, eval)(rw.script);
  } catch (e) {
    error = errorText(e, name);
  }
  await turn();
  if (c.uncaught.length && !error) error = c.uncaught.join("\n");
  else if (c.uncaught.length) error += "\n" + c.uncaught.join("\n");
  cur = undefined;
  flush(c);
  return answer(c, earlier, value, error);
}

// answer fits stdout and the result into the budget: each gets what it needs when
// both fit, else the smaller keeps up to half and the larger gets the rest. The whole
// stdout and result stay in $stdout and $result, and in files when cut.
function answer(c: Call, earlier: string, value: unknown, error: string | undefined) {
  const g = globalThis as Record<string, unknown>;
  const stdout = earlier + (c.chunks.length === 1 ? c.chunks[0] : c.chunks.join(""));
  g.$stdout = stdout;
  let json: string | undefined, jsonErr: string | undefined;
  if (error === undefined) {
    g.$result = value;
    try {
      json = toJSON(value, c.name);
    } catch (e) {
      jsonErr = `the result could not be turned into JSON (${e instanceof Error ? e.message : e}); it is in $result`;
    }
  }
  const res: Record<string, unknown> = { success: error === undefined };
  let errText = error;
  const B = c.budget;
  if (errText !== undefined && size(errText, B / 2) > B / 2) errText = fit(errText, utf8(errText), B / 2);
  const errCost = errText ? size(errText) : 0;
  const sOut = size(stdout, B), sRes = json ? size(json, B) : 0;
  const total = c.bytes + utf8(earlier);
  let outRoom = B - errCost, resRoom = B - errCost;
  if (sOut + sRes > B - errCost) {
    const half = (B - errCost) / 2;
    if (sRes <= half) outRoom = B - errCost - sRes;
    else if (sOut <= half) resRoom = B - errCost - sOut;
    else outRoom = resRoom = half;
  }
  const truncated: Record<string, unknown> = {};
  if (sOut > outRoom || c.bytes > c.keptBytes) {
    const file = keepStdout(c);
    res.stdout = fit(stdout, total, outRoom, file ? `${file} and $stdout` : "$stdout");
    truncated.stdoutBytes = total;
    if (file) truncated.stdoutFile = file;
    else if (c.fileErr) truncated.stdoutFileError = c.fileErr;
  } else {
    res.stdout = stdout;
  }
  if (json !== undefined && sRes > resRoom) {
    const bytes = utf8(json);
    let where = "$result";
    if (c.prefix && bytes <= keepMax) {
      try {
        Deno.mkdirSync(dir(c.prefix), { recursive: true });
        Deno.writeTextFileSync(c.prefix + ".result.json", json);
        truncated.resultFile = c.prefix + ".result.json";
        where = `${c.prefix}.result.json and $result`;
        prune(dir(c.prefix));
      } catch (e) {
        truncated.resultFileError = e instanceof Error ? message(e) : String(e);
      }
    }
    truncated.resultBytes = bytes;
    truncated.resultPreview = fit(json, bytes, resRoom, where);
  } else if (json !== undefined) {
    res.result = JSON.parse(json);
  }
  if (jsonErr) {
    res.success = false;
    errText = jsonErr;
  }
  if (errText !== undefined) res.error = errText;
  if (Object.keys(truncated).length) res.truncated = truncated;
  return res;
}

function uncaught(what: string, e: unknown) {
  const text = what + ": " + errorText(e, cur?.name);
  if (cur) cur.uncaught.push(text);
  else if (late.length < 1 << 16) late += text + "\n";
}

globalThis.addEventListener("unhandledrejection", (ev) => {
  ev.preventDefault();
  uncaught("Unhandled promise rejection", ev.reason);
});
globalThis.addEventListener("error", (ev) => {
  ev.preventDefault();
  uncaught("Uncaught error in a callback", ev.error);
});

// checkFile writes the file `deno check` checks for a snippet: the snippet, then the
// globals earlier snippets declared and this one does not, as any (their types are not
// known here), after it so that its lines stay the snippet's. It sits in /workspace, so
// relative imports resolve as they do when the snippet runs.
function checkFile(code: string) {
  const name = `check-${seq + 1}.ts`;
  pendingName = name, pendingCode = code;
  try {
    const own = rewrite(code, name).names;
    const names = [...declared].filter((n) => !own.has(n));
    const path = `${workspace}/.check-${Date.now()}-${seq}.ts`;
    Deno.writeTextFileSync(path, code + "\n" + names.map((n) => `declare var ${n}: any;`).join("\n") + "\nexport {};\n");
    return { path };
  } catch (e) {
    return { error: errorText(e, name) };
  }
}

let queue = Promise.resolve();
async function serve(conn: Deno.Conn) {
  const lines = conn.readable.pipeThrough(new TextDecoderStream()).pipeThrough(splitLines());
  const w = conn.writable.getWriter();
  const send = (v: unknown) => {
    w.write(enc.encode(JSON.stringify(v) + "\n")).catch(() => {});
  };
  try {
    for await (const line of lines) {
      if (!line.trim()) continue;
      const req = JSON.parse(line);
      if (req.op === "hello") {
        send({ pid: Deno.pid });
        continue;
      }
      if (req.op === "check") {
        send(checkFile(String(req.code ?? "")));
        continue;
      }
      const res = await (queue = queue.catch(() => {}).then(() => run(req, send)) as Promise<unknown>);
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
