// pkgdocs prints the documentation the installed packages ship, one JSON line per
// file: {package, version, path, text}. Arguments: the node_modules directory, then
// the package names. A package's README, and its type declarations: the entry its
// package.json names (types, typings, exports["."].types) or index.d.ts, and the
// declaration files that one imports or re-exports relatively, breadth first, within
// bounds. @types/<name> stands in for a package without declarations.
const [root, ...names] = Deno.args;
const maxFile = 1 << 20;
const maxFilesPerPackage = 40;
const maxBytesPerPackage = 8 << 20;

function readText(path: string): string | undefined {
  try {
    const info = Deno.statSync(path);
    if (!info.isFile || info.size > maxFile) return undefined;
    return Deno.readTextFileSync(path);
  } catch {
    return undefined;
  }
}

function packageJSON(dir: string): Record<string, unknown> | undefined {
  const t = readText(`${dir}/package.json`);
  if (t === undefined) return undefined;
  try {
    return JSON.parse(t);
  } catch {
    return undefined;
  }
}

function typesEntry(pj: Record<string, unknown>): string | undefined {
  const ex = pj.exports as Record<string, unknown> | undefined;
  const dot = ex && typeof ex === "object" ? (ex["."] as Record<string, unknown> | undefined) : undefined;
  for (const c of [pj.types, pj.typings, dot && typeof dot === "object" ? dot.types : undefined]) {
    if (typeof c === "string") return c;
  }
  return undefined;
}

// resolve finds the declaration file a relative specifier names.
function resolve(dir: string, from: string, spec: string): string | undefined {
  const base = new URL(spec, `file://${dir}/${from}`).pathname.slice(dir.length + 1);
  const stem = base.replace(/\.(m|c)?js$/, "");
  for (const c of [base, `${stem}.d.ts`, `${stem}.d.mts`, `${stem}.d.cts`, `${stem}/index.d.ts`]) {
    if (c.startsWith("..") || !/\.d\.[mc]?ts$/.test(c)) continue;
    if (readText(`${dir}/${c}`) !== undefined) return c;
  }
  return undefined;
}

const refs = /(?:from\s*|import\s*\(\s*|<reference\s+path\s*=\s*)["'](\.{1,2}\/[^"']+)["']/g;

for (const name of names) {
  let dir = `${root}/${name}`;
  let pj = packageJSON(dir);
  if (pj === undefined) continue;
  const version = String(pj.version ?? "");
  let budget = maxBytesPerPackage;
  const emit = (path: string, text: string) => {
    if (text.length > budget) return false;
    budget -= text.length;
    console.log(JSON.stringify({ package: name, version, path, text }));
    return true;
  };
  try {
    for (const e of Deno.readDirSync(dir)) {
      if (e.isFile && /^readme(\.(md|markdown|txt))?$/i.test(e.name)) {
        const t = readText(`${dir}/${e.name}`);
        if (t !== undefined) emit(e.name, t);
        break;
      }
    }
  } catch {
    // no README
  }
  let entry = typesEntry(pj);
  if (entry === undefined && readText(`${dir}/index.d.ts`) !== undefined) entry = "index.d.ts";
  if (entry === undefined && !name.startsWith("@types/")) {
    // The DefinitelyTyped package, when it is installed too.
    const typesName = "@types/" + (name.startsWith("@") ? name.slice(1).replace("/", "__") : name);
    const tdir = `${root}/${typesName}`;
    const tpj = packageJSON(tdir);
    if (tpj !== undefined) {
      dir = tdir;
      pj = tpj;
      entry = typesEntry(tpj) ?? "index.d.ts";
    }
  }
  if (entry === undefined) continue;
  const queue = [entry.replace(/^\.\//, "")];
  const seen = new Set(queue);
  for (let n = 0; queue.length > 0 && n < maxFilesPerPackage; n++) {
    const file = queue.shift()!;
    const text = readText(`${dir}/${file}`);
    if (text === undefined || !emit(dir.endsWith(name) ? file : `${dir.slice(root.length + 1)}/${file}`, text)) continue;
    for (const m of text.matchAll(refs)) {
      const r = resolve(dir, file, m[1]);
      if (r !== undefined && !seen.has(r)) {
        seen.add(r);
        queue.push(r);
      }
    }
  }
}
