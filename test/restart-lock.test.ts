import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cliEnv, freePort, plinthBin, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'

// A supervisor restarting the server right after a stop: the new process waits (bounded) for the old
// one to let go of the embedded database, and says so, instead of exiting at once.
describe('a restart on the embedded database while the old process is still stopping', () => {
  let cwd: string
  const servers: ServeProcess[] = []
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-restart-'))
  })
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.kill()))
    await rm(cwd, { recursive: true, force: true })
  })

  it('waits for the data directory, says so, and starts once the old process is gone', async () => {
    const old = await startServe({ cwd, timeoutMs: 150_000 })
    servers.push(old)
    const port = await freePort()
    const next = spawn(process.execPath, [plinthBin, 'serve'], {
      cwd,
      env: cliEnv({ PORT: String(port), PLINTH_DATA_DIR_LOCK_WAIT: '120s' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    next.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    next.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    const exited = new Promise<number | null>((resolve) => next.once('close', resolve))
    const waitFor = async (pattern: RegExp, what: string): Promise<void> => {
      for (const deadline = Date.now() + 120_000; !pattern.test(output);) {
        if (next.exitCode !== null)
          throw new Error(`the new server exited (${next.exitCode}) before ${what}:\n${output}`)
        if (Date.now() > deadline) throw new Error(`no ${what}:\n${output}`)
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }
    try {
      await waitFor(
        /held by process \d+ \(another server, or one still stopping\); waiting up to 120 s/,
        'waiting message',
      )
      expect(await old.stop('SIGTERM')).toBe(0)
      await waitFor(/listening on http:\/\//, 'listening line')
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200)
    } finally {
      next.kill('SIGTERM')
      await exited
    }
  }, 300_000)

  it('with no wait configured, refuses at once while the other process runs', async () => {
    const holder = await startServe({ cwd, timeoutMs: 150_000 })
    servers.push(holder)
    const refused = await runPlinth(['serve'], {
      cwd,
      env: { PORT: String(await freePort()), PLINTH_DATA_DIR_LOCK_WAIT: '0' },
      timeoutMs: 120_000,
    })
    expect(refused.code).not.toBe(0)
    expect(refused.stderr).toContain(`in use by another Plinth process (pid ${holder.pid})`)
    await holder.stop('SIGTERM')
  }, 300_000)
})
