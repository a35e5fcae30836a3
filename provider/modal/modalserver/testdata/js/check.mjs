// Runs Modal's official JS SDK against the local Modal-compatible server. The Go test
// (../../js_test.go) starts the server and sets MODAL_SERVER_URL, the token pair and
// TUNNEL_PORT (the sandbox port this script serves HTTP on, from inside the sandbox,
// with this same node binary). Covers create from a registry name and from an image
// id, exec, files, tunnels, snapshot, list and terminate. Prints one JSON line.
import { ModalClient } from "modal";

const port = Number(process.env.TUNNEL_PORT);
const modal = new ModalClient();
const out = {};
try {
  const app = await modal.apps.fromName("js-check", { createIfMissing: true });
  const image = modal.images.fromRegistry("debian:bookworm-slim");
  const sb = await modal.sandboxes.create(app, image, { name: "js-box", encryptedPorts: [port], env: { FROM_JS: "yes" } });
  out.sandboxId = sb.sandboxId;

  const p = await sb.exec(["sh", "-c", "echo hello $FROM_JS"]);
  out.stdout = await p.stdout.readText();
  out.exitCode = await p.wait();

  await sb.filesystem.writeText("written from js\n", "/home/user/js/note.txt");
  out.readBack = await sb.filesystem.readText("/home/user/js/note.txt");

  // An HTTP server inside the sandbox (its own network): a long-running exec that
  // says "listening" once it does.
  const server = `require("http").createServer((q, s) => s.end("js tunnel ok"))` +
    `.listen(${port}, "127.0.0.1", () => console.log("listening"))`;
  const srv = await sb.exec([process.execPath, "-e", server]);
  const first = await srv.stdout.getReader().read();
  if (String(first.value).trim() !== "listening") throw new Error(`server in the sandbox said ${first.value}`);

  const tunnels = await sb.tunnels();
  out.tunnelUrl = tunnels[port].url;
  out.tunnelBody = await (await fetch(out.tunnelUrl)).text();

  // Snapshot, then a sandbox from the snapshot's image id has the file.
  const snap = await sb.snapshotFilesystem();
  out.snapshotImageId = snap.imageId;
  const sb2 = await modal.sandboxes.create(app, await modal.images.fromId(snap.imageId));
  out.restoredRead = await sb2.filesystem.readText("/home/user/js/note.txt");

  out.listed = [];
  for await (const s of modal.sandboxes.list({ appId: app.appId })) out.listed.push(s.sandboxId);

  await sb2.terminate();
  await sb.terminate();
  out.exitAfterTerminate = await sb.wait();
  out.ok = true;
} catch (e) {
  out.ok = false;
  out.error = String(e && e.stack || e);
} finally {
  modal.close();
}
console.log(JSON.stringify(out));
