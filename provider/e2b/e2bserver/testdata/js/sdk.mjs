// Drives the local E2B server with the official E2B JS SDK (pinned in package.json):
// create, run a command with streamed output, write and read a file, pause, connect,
// list and kill. Configured by E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL and
// E2B_DOMAIN; prints one JSON line with what it saw, which sdk_test.go checks.
import { Sandbox } from 'e2b'

const out = { steps: [] }
const step = (name, data) => out.steps.push({ name, ...data })

const sbx = await Sandbox.create('base', { timeoutMs: 120_000, metadata: { via: 'js-sdk' } })
step('create', { sandboxId: sbx.sandboxId })

const chunks = []
const run = await sbx.commands.run('echo one; sleep 0.2; echo two; echo warn >&2', {
  onStdout: (d) => chunks.push(d),
})
step('run', { exitCode: run.exitCode, stdout: run.stdout, stderr: run.stderr, chunks })

await sbx.files.write('/home/user/sdk.txt', 'written by the js sdk')
step('read', { content: await sbx.files.read('/home/user/sdk.txt') })

const failing = await sbx.commands.run('exit 7').catch((e) => e)
step('fail', { exitCode: failing.exitCode, error: failing.constructor?.name })

await sbx.pause()
step('paused', { state: (await Sandbox.getInfo(sbx.sandboxId)).state })

const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
step('connect', { sandboxId: again.sandboxId, content: await again.files.read('/home/user/sdk.txt') })

const listed = await Sandbox.list({ query: { metadata: { via: 'js-sdk' } } }).nextItems()
step('list', { ids: listed.map((s) => s.sandboxId), states: listed.map((s) => s.state) })

await again.kill()
step('kill', { running: await again.isRunning().catch(() => false) })

console.log(JSON.stringify(out))
