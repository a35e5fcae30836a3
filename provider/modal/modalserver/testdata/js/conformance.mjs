// Modal's official JS SDK against the local Modal-compatible server, step by step, the
// way a user's code does it. The Go test (../../js_test.go) starts the server and sets
// MODAL_SERVER_URL, the token pair, TUNNEL_PORT (a sandbox port this script serves
// HTTP on from inside the sandbox, with this same node binary) and NODE_EXTRA_CA_CERTS.
//
// Prints one JSON line per step: {step, ok, ms, detail} or {step, ok, error}. A step
// marked refused passes when the server refuses with a clear error (its text is in
// `error`; `method` names the SDK method, which docs/modal.md lists as refused). A
// served step may name the method it exercises too.
//
// TUNNEL_SERVER, with TUNNEL_SERVER_ENV, is the HTTP server of the tunnel step when
// the sandboxes boot from an image without node (see below).
//
// ENGINE_VOLUMES=true says the engine under the server has volumes (the volume steps
// use them; otherwise they check the refusal); ONLY=volumes runs the volume steps alone.
// IMAGE_BUILDS=true says the server builds images (RUN steps run; otherwise they are
// refused); ONLY=images runs the image steps alone.
//
// With BENCH=N it prints, instead, the medians of N runs: create → first command,
// command round trip, and file upload MB/s.
import { ExperimentalOutboundPolicy, ModalClient, Probe } from "modal";

const port = Number(process.env.TUNNEL_PORT || 8000);
// V1 sandboxes (MODAL_SANDBOX_V2=false) take other calls for a few methods.
const v1 = process.env.MODAL_SANDBOX_V2 === "false";
const engineVolumes = process.env.ENGINE_VOLUMES === "true";
const imageBuilds = process.env.IMAGE_BUILDS === "true";
// TUNNEL_SERVER is a host binary that serves HTTP when TUNNEL_SERVER_ENV ("port body") is
// set: the tunnel step's server when the sandbox's image has no node.
const tunnelServer = process.env.TUNNEL_SERVER || "";
const tunnelServerEnv = process.env.TUNNEL_SERVER_ENV || "";
const modal = new ModalClient();
const app = await modal.apps.fromName("js-conformance", { createIfMissing: true });
const image = modal.images.fromRegistry("debian:bookworm-slim");

function emit(obj) {
  console.log(JSON.stringify(obj));
}

function check(cond, detail) {
  if (!cond) throw new Error(`unexpected: ${JSON.stringify(detail)}`);
  return detail;
}

// step runs fn and passes when it returns; method (optional) names the SDK method the
// step shows served.
async function step(name, fn, method = "") {
  const t0 = performance.now();
  try {
    const detail = await fn();
    emit({ step: name, ok: true, method, ms: Math.round(performance.now() - t0), detail });
  } catch (e) {
    emit({ step: name, ok: false, method, error: String((e && e.stack) || e) });
  }
}

// rejects runs fn and returns the name and message of the error it throws.
async function rejects(fn) {
  try {
    await fn();
  } catch (e) {
    return { name: (e && e.name) || "", message: String((e && e.message) || e) };
  }
  throw new Error("no error");
}

// refused runs fn and passes when it throws an error whose text has want.
async function refused(name, method, want, fn) {
  try {
    await fn();
    emit({ step: name, ok: false, refused: true, method, error: "no error: the call was served" });
  } catch (e) {
    const error = String((e && e.message) || e);
    emit({ step: name, ok: error.includes(want), refused: true, method, error });
  }
}

// readUntil reads a stream until its text so far contains want (or 20 s pass).
async function readUntil(stream, want) {
  const reader = stream.getReader();
  let text = "";
  const deadline = Date.now() + 20000;
  while (!text.includes(want) && Date.now() < deadline) {
    const { value, done } = await reader.read();
    if (done) break;
    text += typeof value === "string" ? value : new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return text;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function bench(n) {
  const createToFirst = [], roundTrip = [], uploadMBs = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const sb = await modal.sandboxes.create(app, image);
    const p = await sb.exec(["true"]);
    await p.wait();
    createToFirst.push(performance.now() - t0);
    await sb.terminate();
  }
  const sb = await modal.sandboxes.create(app, image);
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const p = await sb.exec(["true"]);
    await p.wait();
    roundTrip.push(performance.now() - t0);
  }
  const data = new Uint8Array(8 << 20).fill(97);
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await sb.filesystem.writeBytes(data, `/tmp/upload-${i}`);
    uploadMBs.push(data.length / 1e6 / ((performance.now() - t0) / 1000));
    await sb.filesystem.remove(`/tmp/upload-${i}`);
  }
  await sb.terminate();
  emit({ bench: true, runs: n, createToFirstCommandMs: median(createToFirst), commandRoundTripMs: median(roundTrip), uploadMBps: median(uploadMBs) });
}

async function conformance() {
  let sb, sb2;
  await step("create with command, env, name, tags, timeout", async () => {
    sb = await modal.sandboxes.create(app, image, {
      command: ["sh", "-c", "echo from-entrypoint; echo entry-err >&2; read line; echo got:$line; sleep 600"],
      env: { FROM_JS: "yes" }, name: "conf-box", tags: { team: "a" }, encryptedPorts: [port], timeoutMs: 300000,
    });
    return check(sb.sandboxId.startsWith("sb-"), sb.sandboxId);
  });
  await step("entrypoint stdin and stdout", async () => {
    await sb.stdin.writeText("hello\n");
    const out = await readUntil(sb.stdout, "got:hello");
    return check(out === "from-entrypoint\ngot:hello\n", out);
  });
  await step("entrypoint stderr", async () => {
    const err = await readUntil(sb.stderr, "entry-err");
    return check(err === "entry-err\n", err);
  });
  await step("exec with env", async () => {
    const p = await sb.exec(["sh", "-c", "echo $FROM_JS $EXTRA"], { env: { EXTRA: "x" } });
    const out = await p.stdout.readText();
    const code = await p.wait();
    return check(out === "yes x\n" && code === 0, { out, code });
  });
  await step("exec exit code and stderr", async () => {
    const p = await sb.exec(["sh", "-c", "echo oops >&2; exit 7"]);
    const err = await p.stderr.readText();
    const code = await p.wait();
    return check(err === "oops\n" && code === 7, { err, code });
  });
  await step("exec streaming", async () => {
    const t0 = performance.now();
    const p = await sb.exec(["sh", "-c", "echo first; sleep 1; echo second"]);
    const first = await readUntil(p.stdout, "first");
    const firstMs = performance.now() - t0;
    await p.wait();
    const endMs = performance.now() - t0;
    return check(first === "first\n" && endMs - firstMs > 500, { firstMs: Math.round(firstMs), endMs: Math.round(endMs) });
  });
  await step("exec stdin", async () => {
    const p = await sb.exec(["cat"]);
    await p.stdin.writeText("via stdin");
    await p.stdin.close();
    const out = await p.stdout.readText();
    return check(out === "via stdin" && (await p.wait()) === 0, out);
  });
  await step("exec timeout", async () => {
    const p = await sb.exec(["sleep", "30"], { timeoutMs: 1000 });
    try {
      const code = await p.wait();
      return check(code === 124, { code });
    } catch (e) {
      return check(e.name === "TimeoutError", { error: String(e) });
    }
  });
  await step("exec with pty", async () => {
    const p = await sb.exec(["sh", "-c", "tty; echo on-stderr >&2"], { pty: true });
    const out = await p.stdout.readText();
    return check(out.startsWith("/dev/pts/") && out.includes("on-stderr") && (await p.wait()) === 0, out);
  });
  await step("files", async () => {
    const fs = sb.filesystem;
    await fs.makeDirectory("/home/user/js");
    await fs.writeText("written from js\n", "/home/user/js/note.txt");
    await fs.writeBytes(new Uint8Array([0, 1, 2, 255]), "/home/user/js/bin");
    const text = await fs.readText("/home/user/js/note.txt");
    const bytes = Array.from(await fs.readBytes("/home/user/js/bin"));
    const list = (await fs.listFiles("/home/user/js")).map((f) => f.name).sort();
    const st = await fs.stat("/home/user/js/note.txt");
    let missing = "";
    try {
      await fs.readText("/home/user/js/none");
    } catch (e) {
      missing = e.constructor.name;
    }
    await fs.remove("/home/user/js/bin");
    return check(text === "written from js\n" && bytes.join() === "0,1,2,255" && list.join() === "bin,note.txt" &&
      missing === "SandboxFilesystemNotFoundError", { text, bytes, list, size: st.size, missing });
  });
  await step("tunnel to an HTTP server inside", async () => {
    const url = (await sb.tunnels())[port].url;
    if (tunnelServer) {
      // An image without node: the Go test's own binary serves HTTP (copied in).
      await sb.filesystem.copyFromLocal(tunnelServer, "/run/tunnel-http");
      await (await sb.exec(["chmod", "755", "/run/tunnel-http"])).wait();
      await sb.exec(["/run/tunnel-http"], { env: { [tunnelServerEnv]: `${port} js tunnel ok` } });
    } else {
      const server = `require("http").createServer((q, s) => s.end("js tunnel ok"))` +
        `.listen(${port}, "127.0.0.1", () => console.log("listening"))`;
      const srv = await sb.exec([process.execPath, "-e", server]);
      await readUntil(srv.stdout, "listening");
    }
    let body, err;
    for (let i = 0; i < 100 && body === undefined; i++) { // until it listens: at most 10 s
      try { body = await (await fetch(url)).text(); } catch (e) { err = e; await new Promise((r) => setTimeout(r, 100)); }
    }
    return check(url.startsWith("https://") && body === "js tunnel ok", { url, body, err: String(err) });
  });
  await step("list with filters, fromName, fromId", async () => {
    sb2 = await modal.sandboxes.create(app, image, { tags: { team: "b" } });
    const byTag = [];
    for await (const s of modal.sandboxes.list({ appId: app.appId, tags: { team: "a" } })) byTag.push(s.sandboxId);
    const all = [];
    for await (const s of modal.sandboxes.list({ appId: app.appId })) all.push(s.sandboxId);
    const named = await modal.sandboxes.fromName("js-conformance", "conf-box");
    const byId = await modal.sandboxes.fromId(sb.sandboxId);
    const tags = await sb.getTags();
    return check(byTag.join() === sb.sandboxId && all.length === 2 && named.sandboxId === sb.sandboxId &&
      byId.sandboxId === sb.sandboxId && tags.team === "a", { byTag, all, tags });
  });
  await step("snapshotFilesystem, images.fromId, create from it", async () => {
    const snap = await sb.snapshotFilesystem();
    const sb3 = await modal.sandboxes.create(app, await modal.images.fromId(snap.imageId));
    const text = await sb3.filesystem.readText("/home/user/js/note.txt");
    await sb3.terminate();
    return check(snap.imageId.startsWith("im-") && text === "written from js\n", { imageId: snap.imageId, text });
  });
  await step("terminate, then wait() is 137", async () => {
    await sb.terminate();
    const code = await sb.wait();
    return check(code === 137, { code });
  });
  await step("exec after terminate is refused", async () => {
    try {
      const again = await modal.sandboxes.fromId(sb.sandboxId);
      await (await again.exec(["true"])).wait();
    } catch (e) {
      return String(e.message || e);
    }
    throw new Error("exec in a terminated sandbox succeeded");
  });
  await step("timeout, then wait() is 124", async () => {
    const t = await modal.sandboxes.create(app, image, { command: ["sleep", "600"], timeoutMs: 2000 });
    const code = await t.wait();
    return check(code === 124, { code });
  });
  await step("command's own exit code", async () => {
    const t = await modal.sandboxes.create(app, image, { command: ["sh", "-c", "exit 5"] });
    const code = await t.wait();
    return check(code === 5, { code });
  });
  await step("readiness probe, waitUntilReady", async () => {
    const t = await modal.sandboxes.create(app, image, { readinessProbe: Probe.withExec(["test", "-e", "/tmp/ready"]) });
    let early = "";
    try {
      await t.waitUntilReady(300);
    } catch (e) {
      early = e.name || String(e);
    }
    await (await t.exec(["touch", "/tmp/ready"])).wait();
    await t.waitUntilReady(10000);
    await t.terminate();
    return check(early !== "", { early });
  });
  await sb2.terminate();

  await volumeSteps();
  await imageSteps();
  await refused("GPU", "", "local Modal server: GPUs are not available",
    () => modal.sandboxes.create(app, image, { gpu: "T4" }));
  await refused("named secret", "SecretService.fromName", "local Modal server: named Secrets are not stored locally",
    () => modal.secrets.fromName("prod-keys"));
  await refused("queues", "QueueService.fromName", "local Modal server: QueueGetOrCreate is not served",
    () => modal.queues.fromName("q", { createIfMissing: true }));
  await refused("functions", "FunctionService.fromName", "local Modal server: FunctionGet is not served",
    () => modal.functions.fromName("app", "fn"));
  const live = await modal.sandboxes.create(app, image);
  await refused("snapshotDirectory", "Sandbox.snapshotDirectory", "local Modal server: TaskSnapshotDirectory is not served",
    () => live.snapshotDirectory("/tmp"));
  await refused("mountImage", "Sandbox.mountImage", "local Modal server: TaskMountDirectory is not served",
    () => live.mountImage("/mnt/img", image));
  await refused("createConnectToken", "Sandbox.createConnectToken", "local Modal server: SandboxCreateConnectToken",
    () => live.createConnectToken());
  await refused("filesystem.watch", "SandboxFilesystem.watch", "not supported by the local Modal server",
    async () => {
      for await (const ev of live.filesystem.watch("/tmp")) return ev;
    });
  for (const [method, want, fn] of [
    ["ImageService.fromName", "local Modal server: published images are not stored locally", () => modal.images.fromName("x")],
    ["ImageService.delete", "local Modal server: ImageDelete is not served", () => modal.images.delete("im-x")],
    ["Image.publish", "local Modal server: ImagePublish is not served", () => image.publish("x")],
    ["ProxyService.fromName", "local Modal server: ProxyGet is not served", () => modal.proxies.fromName("p")],
    ["SecretService.delete", "local Modal server: named Secrets are not stored locally", () => modal.secrets.delete("x")],
    ["ClsService.fromName", "local Modal server: FunctionGet is not served", () => modal.cls.fromName("a", "C")],
    ["FunctionCallService.fromId", "local Modal server: FunctionCallFromId is not served", () => modal.functionCalls.fromId("fc-x").then((f) => f.get())],
    ["QueueService.ephemeral", "local Modal server: QueueGetOrCreate is not served", () => modal.queues.ephemeral()],
    ["Sandbox.experimentalSetName", v1 ? "only supported for V2 sandboxes" : "local Modal server: SandboxSetName is not served", () => live.experimentalSetName("n2")],
    ["Sandbox.experimentalSnapshot", v1 ? "local Modal server: SandboxSnapshot is not served" : "local Modal server: TaskSnapshotMemory is not served", () => live.experimentalSnapshot()],
    ["Sandbox.experimentalGetExitSnapshot", "local Modal server: SandboxGetExitSnapshot", () => live.experimentalGetExitSnapshot()],
    ["Sandbox.reloadVolumes", "local Modal server: TaskReloadVolumes is not served", () => live.reloadVolumes()],
    ["Sandbox.unmountImage", "local Modal server: TaskUnmountDirectory is not served", () => live.unmountImage("/mnt")],
    ["SidecarService.list", "local Modal server: TaskContainerList is not served", () => live.experimentalSidecars.list()],
    ["SandboxLogsManager.fetch", "local Modal server: AppCountLogs is not served", async () => {
      for await (const e of live.logs.fetch({ since: new Date(Date.now() - 60000), until: new Date() })) return e;
    }],
    ["SandboxLogsManager.tail", "local Modal server: AppFetchLogs is not served", async () => {
      for await (const e of live.logs.tail({})) return e;
    }],
    ["FunctionService.fromId", "local Modal server: FunctionGetById is not served", () => modal.functions.fromId("fu-x")],
    ["QueueService.delete", "local Modal server: QueueGetOrCreate is not served", () => modal.queues.delete("q")],
    ["SidecarService.create", v1 ? "local Modal server: TaskContainerCreate is not served" : "local Modal server: SandboxContainerCreate", async () => live.experimentalSidecars.create("side", await image.build(app))],
    ["SidecarService.get", "local Modal server: TaskContainer", () => live.experimentalSidecars.get("sc-x")],
    ["Sandbox.updateNetworkPolicy", "local Modal server: TaskSetNetworkAccess is not served", () => live.updateNetworkPolicy({ outboundCidrAllowlist: [], outboundDomainAllowlist: [] })],
    ["ImageService.fromGcpArtifactRegistry", "local Modal server: private registries cannot be pulled", async () =>
      modal.sandboxes.create(app, modal.images.fromGcpArtifactRegistry("us-docker.pkg.dev/p/r/i:1", await modal.secrets.fromObject({ A: "b" })))],
    ["ImageService.fromAwsEcr", "local Modal server: private registries cannot be pulled", async () =>
      modal.sandboxes.create(app, modal.images.fromAwsEcr("1.dkr.ecr.us-east-1.amazonaws.com/i:1", await modal.secrets.fromObject({ A: "b" })))],
    ["CloudBucketMountService.create", "local Modal server: NFS and cloud bucket mounts are not available", () =>
      modal.sandboxes.create(app, image, { cloudBucketMounts: { "/b": modal.cloudBucketMounts.create("bucket") } })],
    ["EnvironmentObjectsService.list", "local Modal server: EnvironmentList is not served", async () => {
      const got = await modal.environments.objects.list();
      if (got && got[Symbol.asyncIterator]) for await (const e of got) return e;
      return got;
    }],
    ["EnvironmentObjectsService.create", "local Modal server: EnvironmentCreate is not served", () => modal.environments.objects.create("env2")],
    ["EnvironmentObjectsService.delete", "local Modal server: EnvironmentDelete is not served", () => modal.environments.objects.delete("env2")],
    ["Sandbox.experimentalUpdateOutboundPolicy", "local Modal server: TaskSetOutboundPolicy is not served", () =>
      live.experimentalUpdateOutboundPolicy(new ExperimentalOutboundPolicy().withHeaderReplacement({ domain: "example.com", headers: { "x-a": "b" } }))],
    ["EnvironmentAppsService.list", "local Modal server: AppList is not served", async () => {
      const env = await modal.environments.fromName("main");
      for await (const a of env.apps.list()) return a;
    }],
  ]) {
    await refused(method, method, want, fn);
  }
  await live.terminate();
}

// volumeSteps: on an engine with volumes, a named volume made with createIfMissing and
// mounted at create keeps what one sandbox wrote for the next one, after the first is
// terminated; a snapshot leaves it out; an ephemeral volume mounts; deleting a mounted
// volume is refused and deleting it afterwards works. Without volumes each volume
// method is the local server's refusal.
async function volumeSteps() {
  const noVolumes = "local Modal server: Volumes are not available";
  if (!engineVolumes) {
    await refused("volumes", "VolumeService.fromName", noVolumes, () => modal.volumes.fromName("data", { createIfMissing: true }));
    await refused("ephemeral volume", "VolumeService.ephemeral", noVolumes, () => modal.volumes.ephemeral());
    await refused("volume delete", "VolumeService.delete", noVolumes, () => modal.volumes.delete("data"));
    return;
  }
  let b;
  await step("volumes.fromName (createIfMissing) kept across two sandboxes", async () => {
    const missing = await rejects(() => modal.volumes.fromName("conf-data"));
    const vol = await modal.volumes.fromName("conf-data", { createIfMissing: true });
    const a = await modal.sandboxes.create(app, image, { volumes: { "/mnt/data": vol } });
    const w = await a.exec(["sh", "-c", "echo kept > /mnt/data/f && echo own > /home/user/own"]);
    const wrote = await w.wait();
    await a.terminate();
    const again = await modal.volumes.fromName("conf-data");
    b = await modal.sandboxes.create(app, image, { volumes: { "/work": again } });
    const text = await b.filesystem.readText("/work/f");
    return check(missing.name === "NotFoundError" && wrote === 0 && again.volumeId === vol.volumeId && text === "kept\n",
      { missing, wrote, volumeId: vol.volumeId, text });
  }, "VolumeService.fromName");
  await step("snapshotFilesystem leaves the volume out", async () => {
    const snap = await b.snapshotFilesystem();
    const c = await modal.sandboxes.create(app, await modal.images.fromId(snap.imageId));
    const p = await c.exec(["sh", "-c", "ls -A /work 2>/dev/null; echo end"]);
    const out = await p.stdout.readText();
    await c.terminate();
    return check(out === "end\n", { out });
  });
  await step("volumes.ephemeral mounted at create", async () => {
    const eph = await modal.volumes.ephemeral();
    const s = await modal.sandboxes.create(app, image, { volumes: { "/scratch": eph } });
    const p = await s.exec(["sh", "-c", "echo e > /scratch/x && cat /scratch/x"]);
    const out = await p.stdout.readText();
    await s.terminate();
    eph.closeEphemeral();
    return check(out === "e\n" && eph.volumeId.startsWith("vo-"), { out, volumeId: eph.volumeId });
  }, "VolumeService.ephemeral");
  await step("volumes.delete of a mounted volume is refused", async () => {
    const e = await rejects(() => modal.volumes.delete("conf-data"));
    return check(e.message.includes(`Volume 'conf-data' is in use by ${b.sandboxId}`), e);
  });
  await step("volumes.delete once no sandbox mounts it", async () => {
    await b.terminate();
    await modal.volumes.delete("conf-data");
    const gone = await rejects(() => modal.volumes.fromName("conf-data"));
    return check(gone.name === "NotFoundError", { gone });
  }, "VolumeService.delete");
}

// imageSteps: with image builds, a RUN step runs and the sandbox sees what it made;
// without, it is refused. A registry image other than a Debian base is refused either way.
async function imageSteps() {
  if (imageBuilds) {
    await step("image RUN steps", async () => {
      const img = modal.images.fromRegistry("debian:bookworm-slim").dockerfileCommands(["RUN echo built > /built"]);
      const s = await modal.sandboxes.create(app, img);
      const p = await s.exec(["cat", "/built"]);
      const out = await p.stdout.readText();
      await p.wait();
      await s.terminate();
      return check(out === "built\n", { out, imageId: img.imageId });
    });
  } else {
    await refused("image RUN steps", "", "local Modal server: cannot run the image's build step",
      () => modal.sandboxes.create(app, modal.images.fromRegistry("debian:bookworm-slim").dockerfileCommands(["RUN echo hi"])));
  }
  await refused("registry image the host cannot stand in for", "", "cannot pull registry image",
    () => modal.sandboxes.create(app, modal.images.fromRegistry("alpine:3.20")));
}

try {
  if (process.env.ONLY === "volumes") await volumeSteps();
  else if (process.env.ONLY === "images") await imageSteps();
  else if (process.env.BENCH) await bench(Number(process.env.BENCH));
  else await conformance();
} catch (e) {
  emit({ step: "script", ok: false, error: String((e && e.stack) || e) });
} finally {
  modal.close();
}
