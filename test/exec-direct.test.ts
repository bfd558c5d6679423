import { execFileSync, spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildExecEnv, defaultLimits, detectHostSupport, DirectBackend, type ExecSpec } from '../src/exec/index.js'
import { waitFor } from './helpers/waits.js'

function running(pattern: string): string[] {
  return execFileSync('ps', ['-eo', 'stat=,args='], { encoding: 'utf8' })
    .split('\n')
    .filter((line) => line.includes(pattern) && !/^\s*Z/.test(line) && !line.includes('ps -eo'))
}

describe('the direct backend', () => {
  let work: string
  let backend: DirectBackend
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'plinth-direct-'))
    backend = new DirectBackend(await detectHostSupport())
  })
  afterAll(async () => rm(work, { recursive: true, force: true }))

  const spec = (argv: string[], extra: Partial<ExecSpec> = {}): ExecSpec => ({
    argv,
    cwd: work,
    env: buildExecEnv(work),
    timeoutMs: 5000,
    limits: defaultLimits,
    network: true,
    mounts: { ro: [], rw: [] },
    ...extra,
  })

  it('captures stdout and stderr separately, feeds stdin, and passes only the allowlisted environment', async () => {
    process.env.PLINTH_DIRECT_TEST_API_KEY = 'sk-should-never-reach-0123456789'
    try {
      const result = await backend.run(
        spec(['/bin/sh', '-c', 'cat; echo to-err >&2; env; exit 7'], { stdin: 'from stdin\n' }),
      )
      expect(result.exitCode).toBe(7)
      expect(result.stdout.startsWith('from stdin\n')).toBe(true)
      expect(result.stderr).toBe('to-err\n')
      expect(result.stdout).not.toContain('sk-should-never-reach')
      expect(result.stdout).toContain(`HOME=${work}`)
    } finally {
      delete process.env.PLINTH_DIRECT_TEST_API_KEY
    }
  })

  it('kills the whole tree on cancel within 1.5 s, daemons included, leaving nothing', async () => {
    const marker = `plinth-direct-${process.pid}`
    const controller = new AbortController()
    const pending = backend.run(
      spec(
        [
          '/bin/bash',
          '-c',
          `(setsid sh -c "exec -a ${marker}-a sleep 300" &); (exec -a ${marker}-b sleep 300) & sleep 300`,
        ],
        { timeoutMs: 60_000 },
      ),
      { signal: controller.signal },
    )
    // The tree is up once a renamed sleep runs (the daemon is started before it; dash's exec has no -a).
    const renamed = new RegExp(`^\\s*\\S+\\s+${marker}-[ab] `)
    await waitFor(() => running(marker).some((line) => renamed.test(line)), { what: 'the tree to be up' })
    expect(running(marker).length).toBeGreaterThan(0)
    const started = Date.now()
    controller.abort()
    const result = await pending
    expect(Date.now() - started).toBeLessThan(1500)
    expect(result.timedOut).toBe(false)
    const support = await detectHostSupport()
    // Without cgroups a setsid daemon escapes the process group; with them nothing survives.
    if (support.cgroups.kind !== 'none') expect(running(marker)).toEqual([])
  })

  it('times out: the result says so', async () => {
    const result = await backend.run(spec(['/bin/sh', '-c', 'sleep 30'], { timeoutMs: 300 }))
    expect(result).toMatchObject({ timedOut: true, exitCode: null })
    expect(result.durationMs).toBeLessThan(1500)
  })

  it('a program dies with its server (kill -9 of the server process)', async () => {
    const marker = `plinth-orphan-${process.pid}`
    // A server stand-in: starts a long program through the backend, then waits to be killed.
    const script = `
      import { buildExecEnv, defaultLimits, detectHostSupport, DirectBackend } from ${JSON.stringify(new URL('../src/exec/index.ts', import.meta.url).pathname)}
      const backend = new DirectBackend(await detectHostSupport())
      // The name is put together here: the marker must not be in this process's own command line.
      const name = ['plinth', 'orphan', ${process.pid}].join('-')
      void backend.run({ argv: ['/bin/bash', '-c', 'exec -a ' + name + ' sleep 300'], cwd: ${JSON.stringify(work)},
        env: buildExecEnv(${JSON.stringify(work)}), timeoutMs: 300_000, limits: defaultLimits, network: true,
        mounts: { ro: [], rw: [] } })
      setInterval(() => undefined, 1000)`
    const server = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: 'ignore',
    })
    try {
      await waitFor(() => running(marker).length === 1, { timeoutMs: 30_000, what: 'the program started' })
      server.kill('SIGKILL')
      await waitFor(() => running(marker).length === 0, { timeoutMs: 10_000, what: 'the program died with its server' })
    } finally {
      server.kill('SIGKILL')
      if (running(marker).length > 0) execFileSync('pkill', ['-KILL', '-f', marker])
    }
  })
})
