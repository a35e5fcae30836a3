// Drives the local E2B server with an official E2B JS SDK, step by step, the way a
// user does: node conformance.mjs <sdk-dir>, where <sdk-dir>/node_modules/e2b is the
// SDK to test (pinned/ or latest/). Configured by E2B_API_KEY, E2B_API_URL,
// E2B_SANDBOX_URL and E2B_DOMAIN. Prints one line per step, "STEP <name> ok|FAIL
// <detail>", then one JSON line: {"version", "steps": {name: {ok, detail}},
// "methods": {group: [name…]}, "figures": {…}} that sdk_test.go checks.
// With E2B_CONFORMANCE_FIGURES=N it also measures (median of N): create → first
// command, a command's round trip, and file upload MB/s.
import { createRequire } from 'node:module'
import http from 'node:http'
import { readFileSync } from 'node:fs'

const sdkDir = process.argv[2]
const require = createRequire(sdkDir + '/')
const { Sandbox, Volume } = require('e2b') // Volume: e2b ≥ 2.46 only
const version = JSON.parse(readFileSync(`${sdkDir}/node_modules/e2b/package.json`, 'utf8')).version

const steps = {}
const step = async (name, fn) => {
  try {
    const detail = await fn()
    steps[name] = { ok: true, detail: detail ?? '' }
    console.log(`STEP ${name} ok ${JSON.stringify(detail ?? '')}`)
  } catch (e) {
    steps[name] = { ok: false, detail: `${e?.constructor?.name}: ${e?.message}` }
    console.log(`STEP ${name} FAIL ${steps[name].detail}`)
  }
}
const expect = (cond, what) => {
  if (!cond) throw new Error(what)
}
const eq = (got, want, what) => expect(JSON.stringify(got) === JSON.stringify(want), `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const until = async (what, fn, ms = 10_000) => {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) if (await fn()) return
  throw new Error(`timed out waiting for ${what}`)
}
const run = `r${Date.now()}`

// hostGet GETs http://<host>/ through the server (E2B_SANDBOX_URL), as a browser
// resolving <port>-<id>.<domain> to it would.
const hostGet = (host, path) =>
  new Promise((resolve, reject) => {
    const u = new URL(process.env.E2B_SANDBOX_URL)
    const req = http.get({ host: u.hostname, port: u.port, path, headers: { Host: host } }, (res) => {
      let body = ''
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(10_000, () => req.destroy(new Error('GET timed out')))
  })

let sbx
await step('create', async () => {
  sbx = await Sandbox.create('base', { timeoutMs: 120_000, metadata: { suite: 'conformance', run }, envs: { GREETING: 'hello sdk' } })
  const info = await sbx.getInfo()
  eq([info.metadata.suite, info.metadata.run], ['conformance', run], 'metadata')
  const life = (new Date(info.endAt) - new Date(info.startedAt)) / 1000
  expect(life > 100 && life < 140, `lifetime ${life}s, want about 120s`)
  return { state: info.state }
})
if (!sbx) {
  console.log(JSON.stringify({ version, steps }))
  process.exit(0)
}
const c = sbx.commands
const f = sbx.files

await step('timeout+info', async () => {
  await sbx.setTimeout(200_000)
  const info = await Sandbox.getFullInfo(sbx.sandboxId)
  const left = (new Date(info.endAt) - Date.now()) / 1000
  expect(left > 150 && left < 210, `${left}s left after setTimeout(200 s)`)
  eq([info.sandboxId, info.templateId, await sbx.isRunning()], [sbx.sandboxId, 'base', true], 'info')
})

await step('commands.env', async () => eq((await c.run('echo "$GREETING"')).stdout, 'hello sdk\n', 'stdout'))
await step('commands.stream', async () => {
  const chunks = []
  const r = await c.run('echo one; sleep 0.2; echo two; echo warn >&2', { onStdout: (d) => chunks.push(d) })
  eq([r.exitCode, r.stdout, r.stderr, chunks], [0, 'one\ntwo\n', 'warn\n', ['one\n', 'two\n']], 'run')
})
await step('commands.exitCode', async () => {
  const e = await c.run('exit 7').catch((e) => e)
  eq([e.constructor.name, e.exitCode], ['CommandExitError', 7], 'error')
})
await step('commands.timeout', async () => {
  const t0 = Date.now()
  const e = await c.run('sleep 10', { timeoutMs: 500 }).then(() => null, (e) => e)
  expect(e !== null, 'a command past its timeout succeeded')
  expect(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`)
  return e.constructor.name
})
await step('commands.stdin', async () => {
  const h = await c.run('cat', { background: true, stdin: true })
  await c.sendStdin(h.pid, 'abc\n')
  await c.closeStdin(h.pid)
  const r = await h.wait()
  eq(r.stdout, 'abc\n', 'stdout')
})
await step('commands.list+kill', async () => {
  const h = await c.run('sleep 1; echo late; sleep 60', { background: true })
  expect((await c.list()).some((p) => p.pid === h.pid), 'background process not listed')
  let late = ''
  const h2 = await c.connect(h.pid, { onStdout: (d) => (late += d) })
  await until('output on the connected handle', () => late === 'late\n')
  expect(await c.kill(h.pid), 'kill returned false')
  const e = await h.wait().catch((e) => e)
  return e.constructor.name
})

await step('files.write+read', async () => {
  await f.write('/home/user/one.txt', 'written by the sdk')
  eq(await f.read('/home/user/one.txt'), 'written by the sdk', 'read')
})
await step('files.writeMany', async () => {
  const out = await f.write([
    { path: '/home/user/d1/a.txt', data: 'A' },
    { path: '/home/user/d2/deep/b.txt', data: 'B' },
  ])
  eq(out.map((e) => e.path), ['/home/user/d1/a.txt', '/home/user/d2/deep/b.txt'], 'written paths')
  eq([await f.read('/home/user/d1/a.txt'), await f.read('/home/user/d2/deep/b.txt')], ['A', 'B'], 'contents')
})
await step('files.list+info', async () => {
  eq((await f.list('/home/user/d1')).map((e) => [e.name, e.type]), [['a.txt', 'file']], 'list')
  const i = await f.getInfo('/home/user/d2')
  eq([i.name, i.type], ['d2', 'dir'], 'info')
})
await step('files.makeDir+exists', async () => {
  eq([await f.makeDir('/home/user/nd/x'), await f.makeDir('/home/user/nd/x'), await f.exists('/home/user/nd/x'), await f.exists('/home/user/none')], [true, false, true, false], 'makeDir, again, exists, missing')
})
await step('files.rename', async () => {
  const e = await f.rename('/home/user/d1/a.txt', '/home/user/d3/c.txt')
  eq([e.path, await f.exists('/home/user/d1/a.txt'), await f.read('/home/user/d3/c.txt')], ['/home/user/d3/c.txt', false, 'A'], 'renamed')
})
await step('files.remove', async () => {
  await f.remove('/home/user/d3')
  eq(await f.exists('/home/user/d3'), false, 'removed')
  const e = await f.remove('').catch((e) => e)
  expect(e instanceof Error, 'remove("") succeeded')
  expect(await f.exists('/home/user/one.txt'), 'remove("") emptied the home directory')
  return e.message
})
await step('files.watchDir', async () => {
  await f.makeDir('/home/user/w')
  const seen = []
  const h = await f.watchDir('/home/user/w', (e) => seen.push(`${e.type}:${e.name}`))
  try {
    await f.write('/home/user/w/x.txt', 'x')
    await until('a create event', () => seen.includes('create:x.txt'))
    await f.remove('/home/user/w/x.txt')
    await until('a remove event', () => seen.includes('remove:x.txt'))
  } finally {
    await h.stop()
  }
  return seen
})
await step('files.signedUrls', async () => {
  const up = await sbx.uploadUrl('/home/user/signed.txt')
  const form = new FormData()
  form.append('file', new Blob(['signed upload']), 'signed.txt')
  const put = await fetch(up, { method: 'POST', body: form })
  eq(put.status, 200, `upload status (${await put.text()})`)
  const down = await fetch(await sbx.downloadUrl('/home/user/signed.txt'))
  eq([down.status, await down.text()], [200, 'signed upload'], 'download')
})
await step('files.readMissing', async () => {
  const e = await f.read('/home/user/missing').catch((e) => e)
  expect(/NotFound/.test(e.constructor.name), `error ${e.constructor.name}: ${e.message}`)
  return e.constructor.name
})

await step('getHost.get', async () => {
  await f.write('/home/user/www/index.html', 'served from inside')
  // A one-file HTTP server in Perl: perl-base is in every Debian image and root.
  await f.write('/home/user/www.pl', [
    'use IO::Socket::INET;',
    'my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die "listen: $!";',
    'while (my $c = $s->accept) {',
    '  my ($p) = (<$c> // "") =~ m{^GET (\\S+)};',
    '  while (my $l = <$c>) { last if $l =~ /^\\r?$/ }',
    '  open(my $f, "<", "/home/user/www$p") or do { print $c "HTTP/1.0 404 Not Found\\r\\nContent-Length: 0\\r\\n\\r\\n"; close $c; next };',
    '  my $b = do { local $/; <$f> };',
    '  print $c "HTTP/1.0 200 OK\\r\\nContent-Length: " . length($b) . "\\r\\nConnection: close\\r\\n\\r\\n$b";',
    '  close $c;',
    '}',
  ].join('\n'))
  await c.run('exec perl /home/user/www.pl', { background: true })
  const host = sbx.getHost(8080)
  expect(host.startsWith(`8080-${sbx.sandboxId}.`), `host ${host}`)
  let res
  await until('the server inside', async () => (res = await hostGet(host, '/index.html').catch(() => null))?.status === 200)
  eq(res.body, 'served from inside', 'body')
  return host
})

await step('list.filters', async () => {
  const mine = await Sandbox.list({ query: { metadata: { run }, state: ['running'] } }).nextItems()
  eq(mine.map((s) => [s.sandboxId, s.state]), [[sbx.sandboxId, 'running']], 'by metadata')
  const none = await Sandbox.list({ query: { metadata: { run: 'nope' } } }).nextItems()
  eq(none.length, 0, 'no match')
})

await step('pty', async () => {
  let out = ''
  const dec = new TextDecoder()
  const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d)) })
  const enc = new TextEncoder()
  await sbx.pty.sendInput(t.pid, enc.encode('tty; echo "pty-$((6*7))"\n'))
  await until('pty output', () => out.includes('pty-42'))
  expect(out.includes('/dev/pts/'), `tty: ${JSON.stringify(out.slice(-200))}`)
  await sbx.pty.resize(t.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(t.pid, enc.encode('stty size\n'))
  await until('the new size', () => out.includes('30 100'))
  let again = ''
  const h2 = await sbx.pty.connect(t.pid, { onData: (d) => (again += dec.decode(d)) })
  await sbx.pty.sendInput(t.pid, enc.encode('echo "re-$((2+3))"\n'))
  await until('output on the reconnected handle', () => again.includes('re-5'))
  await h2.disconnect()
  expect(await sbx.pty.kill(t.pid), 'kill returned false')
})

await step('pause+connect', async () => {
  await sbx.pause()
  eq((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'state')
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  eq([await again.files.read('/home/user/one.txt'), (await again.commands.run('echo up')).stdout], ['written by the sdk', 'up\n'], 'after connect')
})

await step('snapshot', async () => {
  const snap = await sbx.createSnapshot()
  expect(snap.snapshotId, 'no snapshot id')
  const listed = await sbx.listSnapshots().nextItems()
  expect(listed.some((s) => s.snapshotId === snap.snapshotId), 'snapshot not listed')
  const copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
  try {
    eq(await copy.files.read('/home/user/one.txt'), 'written by the sdk', 'file in the copy')
  } finally {
    await copy.kill()
  }
})

await step('fork', async () => {
  const forks = await sbx.fork({ timeoutMs: 60_000 })
  eq(forks.length, 1, 'forks')
  const k = forks[0]
  expect(!(k instanceof Error), `fork failed: ${k?.message}`)
  try {
    expect(k.sandboxId !== sbx.sandboxId, 'the fork has the same id')
    eq(await k.files.read('/home/user/one.txt'), 'written by the sdk', 'file in the fork')
  } finally {
    await k.kill()
  }
})

await step('kill', async () => {
  await sbx.kill()
  eq(await sbx.isRunning(), false, 'running after kill')
  const e = await Sandbox.connect(sbx.sandboxId).catch((e) => e)
  expect(e instanceof Error, 'connect after kill succeeded')
  return `${e.constructor.name}: ${e.message}`
})

// Volumes (SDKs with the Volume class, engines with volumes): one volume mounted in two
// sandboxes at once, in use while mounted, destroyed at the end.
await step('volumes', async () => {
  if (!Volume) return 'skipped: this SDK has no Volume class'
  if (process.env.E2B_LOCAL_VOLUMES !== 'true') return 'skipped: the engine has no volumes'
  const vol = await Volume.create(`v${run}`)
  try {
    const a = await Sandbox.create('base', { volumeMounts: { '/data': vol }, timeoutMs: 60_000 })
    const b = await Sandbox.create('base', { volumeMounts: { '/mnt/v': vol.name }, timeoutMs: 60_000 })
    try {
      await a.files.write('/data/note.txt', 'through the volume')
      eq(await b.files.read('/mnt/v/note.txt'), 'through the volume', 'file written in the other sandbox')
      eq((await Volume.getInfo(vol.volumeId)).name, vol.name, 'getInfo name')
      eq((await Volume.connect(vol.volumeId)).token, vol.token, 'connect token')
      expect((await Volume.list()).some((v) => v.volumeId === vol.volumeId), 'list lacks the volume')
      const busy = await Volume.destroy(vol.volumeId).catch((e) => e)
      expect(busy instanceof Error, 'destroy of a mounted volume succeeded')
    } finally {
      await a.kill()
      await b.kill()
    }
  } finally {
    await Volume.destroy(vol.volumeId).catch(() => {})
  }
  eq(await Volume.destroy(vol.volumeId), false, 'destroy of a destroyed volume')
})

// What the SDK shows for what this server does not serve (docs/e2b.md quotes it).
const refusals = {}
const refused = async (name, fn) => {
  try {
    await fn()
    refusals[name] = 'served'
  } catch (e) {
    refusals[name] = `${e.constructor.name}: ${e.message}`
  }
}
{
  const s = await Sandbox.create('base', { timeoutMs: 60_000 })
  await refused('sandbox.getMetrics', () => s.getMetrics())
  await refused('sandbox.updateNetwork', () => s.updateNetwork({ allowOut: ['1.1.1.1'] }))
  await refused('Sandbox.deleteSnapshot', () => Sandbox.deleteSnapshot('nope'))
  await refused('Sandbox.create.volumeMounts', () => Sandbox.create('base', { volumeMounts: { '/data': 'no-such-volume' } }))
  await refused('Sandbox.create.network', () => Sandbox.create('base', { network: { denyOut: ['1.1.1.1'] } }))
  await refused('sandbox.getMcpToken', () => s.getMcpToken())
  await s.kill()
}
for (const [k, v] of Object.entries(refusals)) console.log(`REFUSED ${k}: ${v}`)

// The SDK's public methods, for the docs table.
const own = (o) => Object.getOwnPropertyNames(o).filter((n) => n !== 'constructor' && !n.startsWith('_') && typeof Object.getOwnPropertyDescriptor(o, n).value === 'function')
const chain = (p) => {
  const out = new Set()
  for (; p && p !== Object.prototype && p !== Function.prototype; p = Object.getPrototypeOf(p)) own(p).forEach((n) => out.add(n))
  return [...out].sort()
}
const methods = {
  'Sandbox.': chain(Sandbox),
  'sandbox.': chain(Sandbox.prototype),
  'sandbox.commands.': chain(Object.getPrototypeOf(sbx.commands)),
  'sandbox.files.': chain(Object.getPrototypeOf(sbx.files)),
  'sandbox.pty.': chain(Object.getPrototypeOf(sbx.pty)),
}

const figures = {}
const n = Number(process.env.E2B_CONFORMANCE_FIGURES || 0)
if (n > 0) {
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]
  const first = [], rtt = [], mbps = []
  const data = new Uint8Array(16 << 20).fill(97)
  let b
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    const s = await Sandbox.create('base', { timeoutMs: 60_000 })
    await s.commands.run('true')
    first.push(performance.now() - t0)
    if (i === 0) b = s
    else await s.kill()
  }
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    await b.commands.run('true')
    rtt.push(performance.now() - t0)
  }
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    await b.files.write('/home/user/blob', data)
    mbps.push(16 / ((performance.now() - t0) / 1000))
  }
  await b.kill()
  Object.assign(figures, { createToFirstCommandMs: median(first), commandRoundTripMs: median(rtt), uploadMBps: median(mbps) })
}

console.log(JSON.stringify({ version, steps, methods, refusals, figures }))
