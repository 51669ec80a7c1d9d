// The unmodified JavaScript e2b SDK through the parity features (issue 11).
// Run by tests/compat/test_e2b_js.py; prints one JSON object of what it saw.
import { pathToFileURL } from 'node:url'

const { Sandbox } = await import(
  pathToFileURL(`${process.env.E2B_JS_DIR}/node_modules/e2b/dist/index.mjs`).href
)
const out = {}
const tag = `js-${Math.random().toString(16).slice(2, 10)}`

const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { suite: tag } })
try {
  // files: write with metadata, directory mode, absolute symlink target
  await sbx.files.write('/workspace/m.txt', 'js', { metadata: { owner: 'js' } })
  out.metadata = (await sbx.files.getInfo('/workspace/m.txt')).metadata
  out.listedMetadata = (await sbx.files.list('/workspace')).find((e) => e.name === 'm.txt').metadata
  await sbx.files.makeDir('/workspace/dir')
  out.dirMode = (await sbx.files.getInfo('/workspace/dir')).mode
  await sbx.commands.run('ln -s m.txt /workspace/link')
  out.symlinkTarget = (await sbx.files.getInfo('/workspace/link')).symlinkTarget
  const expired = await sbx.downloadUrl('/workspace/m.txt', { useSignatureExpiration: -60_000 })
  const res = await fetch(expired)
  out.expired = { status: res.status, body: await res.text() }

  // snapshots: create, list, start from, delete
  const snap = await sbx.createSnapshot()
  await sbx.files.write('/workspace/m.txt', 'changed')
  out.snapshotsListed = (await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId)
  out.snapshotId = snap.snapshotId
  const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
  out.childRead = await child.files.read('/workspace/m.txt')
  out.parentRead = await sbx.files.read('/workspace/m.txt')
  await child.kill()
  out.deleted = [await Sandbox.deleteSnapshot(snap.snapshotId), await Sandbox.deleteSnapshot(snap.snapshotId)]

  // fork
  const forks = await sbx.fork()
  out.forkRead = await forks[0].files.read('/workspace/m.txt')
  out.forkIsNew = forks[0].sandboxId !== sbx.sandboxId
  await forks[0].kill()

  // metrics
  const metrics = await sbx.getMetrics()
  out.metrics = metrics.length > 0 ? metrics[metrics.length - 1] : null

  // listing over running and paused, filtered, paged
  const other = await Sandbox.create({ timeoutMs: 120_000, metadata: { suite: tag } })
  await other.pause()
  const pager = Sandbox.list({
    query: { metadata: { suite: tag }, state: ['running', 'paused'], template: 'base',
      startedAfter: new Date(Date.now() - 600_000) },
    limit: 1,
  })
  const seen = []
  while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => [s.sandboxId, s.state]))
  out.listed = seen
  out.expectedListed = [sbx.sandboxId, other.sandboxId]
  await Sandbox.kill(other.sandboxId)

  // lifecycle: pause on timeout, resumed by the next envd request
  const napper = await Sandbox.create({ timeoutMs: 1_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  await napper.files.write('/workspace/k.txt', 'kept')
  for (let i = 0; i < 300 && (await napper.getInfo()).state !== 'paused'; i++) {
    await new Promise((r) => setTimeout(r, 50))
  }
  out.napperPaused = (await napper.getInfo()).state
  out.napperRead = await napper.files.read('/workspace/k.txt')
  out.napperAfter = (await napper.getInfo()).state
  await napper.kill()

  // kill during a command
  const handle = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 0 })
  await Sandbox.kill(sbx.sandboxId)
  try {
    await handle.wait()
    out.killError = null
  } catch (err) {
    out.killError = `${err.name}: ${err.message}`
  }
} finally {
  await Sandbox.kill(sbx.sandboxId)
}
console.log(JSON.stringify(out))
