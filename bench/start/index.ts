/**
 * The start bench (`BENCH_ONLY=start npm run bench`): how soon the built server answers `/healthz` on a
 * new data directory (from the migrated template `npm ci` builds) and on a restart, its RSS once idle,
 * on PGlite and (with a database URL) on pg; and the wall time of `plinth --version`, `--help` and
 * `users list` through a running server's admin API. Each figure is printed beside its target
 * (docs/reference/benchmarks.md#start-and-cli-latency).
 *
 * Env: BENCH_START_RUNS (3: starts per case, median reported), BENCH_IDLE_SECONDS (10: how long the
 * server idles before its RSS is read).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { chmod, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { createTempDatabase, createTempDir } from '../lib/resources.js'
import { ms, table } from '../agent/stats.js'

const repoRoot = fileURLToPath(new URL('../../', import.meta.url))
const plinthBin = join(repoRoot, 'bin', 'plinth.js')
const adminToken = 'bench-start-admin-token-0123456789abcdef'

interface Started {
  child: ChildProcess
  url: string
  readyMs: number
}

function settings(): { runs: number; idleSeconds: number } {
  const read = (name: string, fallback: number): number => {
    const value = Number(process.env[name] ?? fallback)
    if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be an integer ≥ 1`)
    return value
  }
  return { runs: read('BENCH_START_RUNS', 3), idleSeconds: read('BENCH_IDLE_SECONDS', 10) }
}

function serverEnv(dataDir: string, databaseUrl: string | undefined): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [name, value] of Object.entries(process.env))
    if (!/^(PLINTH_|DATABASE_URL$|TEST_DATABASE_URL$|BENCH_|PORT$|NODE_OPTIONS$)/.test(name)) env[name] = value
  return {
    ...env,
    NODE_ENV: 'production',
    PORT: '0',
    PLINTH_DATA_DIR: dataDir,
    PLINTH_ADMIN_TOKEN: adminToken,
    ...(databaseUrl && { DATABASE_URL: databaseUrl }),
  }
}

/** `plinth serve` until `/healthz` answers 200; the time counts from the spawn. */
async function startServer(dataDir: string, databaseUrl: string | undefined): Promise<Started> {
  const began = performance.now()
  const child = spawn(process.execPath, [plinthBin, 'serve'], {
    cwd: dataDir,
    env: serverEnv(dataDir, databaseUrl),
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line within 120 s:\n${output}`)), 120_000)
    const onData = (chunk: Buffer): void => {
      output += chunk.toString('utf8')
      const found = /listening on (http:\/\/[^\s"]+)/.exec(output)
      if (found?.[1]) {
        clearTimeout(timer)
        resolve(found[1])
      }
    }
    child.stdout?.on('data', onData)
    child.stderr?.on('data', onData)
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`plinth serve exited (${code}) before listening:\n${output}`))
    })
  })
  for (;;) {
    const ok = await fetch(`${url}/healthz`)
      .then((response) => response.ok)
      .catch(() => false)
    if (ok) break
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return { child, url, readyMs: performance.now() - began }
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  await exited
}

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
  const kb = /VmRSS:\s+(\d+)/.exec(status)?.[1]
  return kb ? Number(kb) / 1024 : Number.NaN
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

/** Wall time of a CLI call (median of `runs`), failing loudly when it does not exit 0. */
async function cliMs(args: string[], env: NodeJS.ProcessEnv, runs: number): Promise<number> {
  const times: number[] = []
  for (let i = 0; i < runs; i++) {
    const began = performance.now()
    const code = await new Promise<number | null>((resolve) => {
      const child = spawn(process.execPath, [plinthBin, ...args], { env, stdio: 'ignore' })
      child.once('exit', resolve)
    })
    if (code !== 0) throw new Error(`plinth ${args.join(' ')} exited ${code}`)
    times.push(performance.now() - began)
  }
  return median(times)
}

interface EngineFigures {
  engine: string
  firstMs: number
  restartMs: number
  idleRssMb: number
  usersListMs: number
}

async function onEngine(
  engine: string,
  databaseUrl: () => Promise<{ url: string | undefined; drop(): Promise<void> }>,
  runs: number,
  idleSeconds: number,
): Promise<EngineFigures> {
  const firsts: number[] = []
  const restarts: number[] = []
  const rss: number[] = []
  let usersListMs = Number.NaN
  for (let run = 0; run < runs; run++) {
    const dir = await createTempDir('plinth-bench-start-')
    // As a checkout's ./data would be: reachable by the sandbox user, so the sandbox probe runs as in use.
    await chmod(dir.path, 0o755)
    const database = await databaseUrl()
    try {
      const first = await startServer(dir.path, database.url)
      firsts.push(first.readyMs)
      await stop(first.child)
      const again = await startServer(dir.path, database.url)
      restarts.push(again.readyMs)
      try {
        await new Promise((resolve) => setTimeout(resolve, idleSeconds * 1000))
        rss.push(await rssMb(again.child.pid ?? 0))
        if (run === 0)
          usersListMs = await cliMs(['users', 'list'], serverEnv(dir.path, database.url), Math.max(runs, 5))
      } finally {
        await stop(again.child)
      }
    } finally {
      await database.drop()
      await dir.remove()
    }
  }
  const figures = { engine, firstMs: median(firsts), restartMs: median(restarts), idleRssMb: median(rss), usersListMs }
  console.log(
    `  ${engine}: first start ${ms(figures.firstMs)} ms, restart ${ms(figures.restartMs)} ms, idle RSS ${figures.idleRssMb.toFixed(0)} MB`,
  )
  return figures
}

export async function runStartBench(adminUrl: string | undefined): Promise<void> {
  const { runs, idleSeconds } = settings()
  // The built server with its template, as `npm ci && npm start` leaves it.
  const build = spawn(process.execPath, [join(repoRoot, 'scripts', 'build-if-stale.mjs'), '--template'], {
    stdio: 'inherit',
  })
  const built = await new Promise<number | null>((resolve) => build.once('exit', resolve))
  if (built !== 0) throw new Error(`building dist/ failed (exit ${built})`)
  console.log(
    `start bench: ${runs} starts per case (median), RSS after ${idleSeconds} s idle; built server (dist/), new data directory from the template`,
  )
  const cliEnv = serverEnv(repoRoot, undefined)
  const version = await cliMs(['--version'], cliEnv, 5)
  const help = await cliMs(['--help'], cliEnv, 5)
  const engines: EngineFigures[] = [
    await onEngine('PGlite', async () => ({ url: undefined, drop: async () => undefined }), runs, idleSeconds),
  ]
  if (adminUrl) engines.push(await onEngine('pg', () => createTempDatabase(adminUrl), runs, idleSeconds))
  else console.log('  pg: skipped (set TEST_DATABASE_URL or BENCH_DATABASE_URL)')

  const rows = [
    ['plinth --version', `${ms(version)} ms`, '≤ 300 ms'],
    ['plinth --help', `${ms(help)} ms`, '≤ 300 ms'],
    ...engines.flatMap((figures) => [
      [
        `${figures.engine}: first start to /healthz`,
        `${ms(figures.firstMs)} ms`,
        figures.engine === 'PGlite' ? '≤ 5,000 ms' : '',
      ],
      [`${figures.engine}: restart to /healthz`, `${ms(figures.restartMs)} ms`, ''],
      [
        `${figures.engine}: idle RSS`,
        `${figures.idleRssMb.toFixed(0)} MB`,
        figures.engine === 'PGlite' ? '≤ 200 MB' : '≤ 120 MB',
      ],
      [`${figures.engine}: plinth users list (admin API)`, `${ms(figures.usersListMs)} ms`, '≤ 300 ms'],
    ]),
  ]
  console.log(`\n${table(['start and CLI', 'measured', 'target'], rows)}`)
}
