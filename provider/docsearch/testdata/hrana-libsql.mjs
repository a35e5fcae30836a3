// A Hrana-over-HTTP server (POST /v2/pipeline: execute, batch, close) for the
// docsearch tests, answered by libSQL itself: the WebAssembly build of libSQL from the
// npm package @libsql/libsql-wasm-experimental, which has libSQL's vector types and
// functions (F32_BLOB, vector32, vector_distance_cos, libsql_vector_idx, vector_top_k)
// and FTS5. The database is in memory; streams share its one connection (the tests
// use one stream at a time). It listens on 127.0.0.1 on a free port and prints
// "listening http://127.0.0.1:PORT" on stdout.
//
// Environment: LIBSQL_WASM, the absolute path of the package's node.mjs; HRANA_TOKEN,
// when set, the bearer token requests must carry.
import http from "node:http";
import { pathToFileURL } from "node:url";
import { randomBytes } from "node:crypto";

const { default: init } = await import(pathToFileURL(process.env.LIBSQL_WASM).href);
const sqlite3 = await init({ print() {}, printErr() {} });
const capi = sqlite3.capi;
const db = new sqlite3.oo1.DB(":memory:", "c");
const token = process.env.HRANA_TOKEN || "";
const streams = new Set();

function decode(v) {
  switch (v?.type) {
    case "null": return null;
    case "integer": return BigInt(v.value);
    case "float": return Number(v.value);
    case "text": return String(v.value);
    case "blob": return new Uint8Array(Buffer.from(v.base64, "base64"));
  }
  throw new Error(`bad value ${JSON.stringify(v)}`);
}

function encode(st, i) {
  switch (capi.sqlite3_column_type(st.pointer, i)) {
    case capi.SQLITE_NULL: return { type: "null" };
    case capi.SQLITE_INTEGER: return { type: "integer", value: String(st.get(i, capi.SQLITE_INTEGER)) };
    case capi.SQLITE_FLOAT: return { type: "float", value: st.get(i, capi.SQLITE_FLOAT) };
    case capi.SQLITE_TEXT: return { type: "text", value: st.get(i, capi.SQLITE_TEXT) };
    default: return { type: "blob", base64: Buffer.from(st.get(i, capi.SQLITE_BLOB) || []).toString("base64") };
  }
}

function execute(stmt) {
  const st = db.prepare(stmt.sql);
  try {
    const args = (stmt.args || []).map(decode);
    if (args.length) st.bind(args);
    for (const a of stmt.named_args || []) st.bind(a.name, decode(a.value));
    const cols = [];
    for (let i = 0; i < capi.sqlite3_column_count(st.pointer); i++) {
      cols.push({ name: capi.sqlite3_column_name(st.pointer, i), decltype: null });
    }
    const rows = [];
    while (st.step()) {
      const row = [];
      for (let i = 0; i < cols.length; i++) row.push(encode(st, i));
      if (stmt.want_rows !== false) rows.push(row);
    }
    return {
      cols, rows,
      affected_row_count: Number(capi.sqlite3_changes(db.pointer)),
      last_insert_rowid: String(capi.sqlite3_last_insert_rowid(db.pointer)),
    };
  } finally {
    st.finalize();
  }
}

function holds(c, results, errors) {
  switch (c.type) {
    case "ok": return results[c.step] != null;
    case "error": return errors[c.step] != null;
    case "not": return !holds(c.cond, results, errors);
    case "and": return c.conds.every((x) => holds(x, results, errors));
    case "or": return c.conds.some((x) => holds(x, results, errors));
    case "is_autocommit": return capi.sqlite3_get_autocommit(db.pointer) !== 0;
  }
  return false;
}

function handle(req) {
  switch (req.type) {
    case "close":
      return { type: "close" };
    case "execute":
      return { type: "execute", result: execute(req.stmt) };
    case "batch": {
      const results = [], errors = [];
      for (const step of req.batch.steps) {
        results.push(null); errors.push(null);
        if (step.condition && !holds(step.condition, results, errors)) continue;
        try { results[results.length - 1] = execute(step.stmt); } catch (e) { errors[errors.length - 1] = { message: e.message, code: "SQLITE_ERROR" }; }
      }
      return { type: "batch", result: { step_results: results, step_errors: errors } };
    }
  }
  throw new Error(`unknown request ${req.type}`);
}

function reply(res, status, body) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

const server = http.createServer((req, res) => {
  if (token && req.headers.authorization !== `Bearer ${token}`) return reply(res, 401, { message: "Unauthorized" });
  if (req.method === "GET" && req.url === "/v2") return reply(res, 200, {});
  if (req.method !== "POST" || req.url !== "/v2/pipeline") return reply(res, 404, { message: "not found" });
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    let body;
    try { body = JSON.parse(Buffer.concat(chunks).toString("utf8")); } catch (e) { return reply(res, 400, { message: `bad JSON: ${e.message}` }); }
    if (body.baton != null && !streams.delete(body.baton)) return reply(res, 400, { message: "unknown or used baton" });
    let open = true;
    const results = body.requests.map((r) => {
      if (!open) return { type: "error", error: { message: "the stream is closed" } };
      try {
        const response = handle(r);
        if (r.type === "close") open = false;
        return { type: "ok", response };
      } catch (e) {
        return { type: "error", error: { message: e.message, code: "SQLITE_ERROR" } };
      }
    });
    let baton = null;
    if (open) {
      baton = randomBytes(16).toString("hex");
      streams.add(baton);
    } else if (capi.sqlite3_get_autocommit(db.pointer) === 0) {
      db.exec("ROLLBACK"); // a stream closed inside a transaction rolls it back
    }
    reply(res, 200, { baton, base_url: null, results });
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(`listening http://127.0.0.1:${server.address().port}`);
});
