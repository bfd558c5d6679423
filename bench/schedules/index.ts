/**
 * The schedule bench (`BENCH_ONLY=schedules npm run bench`), on pg only (several instances share the
 * database): the target, "1,000 schedules firing each minute across two instances: every
 * occurrence fired exactly once, p99 lateness ≤ 1 s".
 *
 * Two Plinth instances (bench/servers/plinth-schedule-server.ts, each its own process, the firer at its
 * default 1 s tick) share a fresh database. The bench writes the users, projects and schedules itself
 * (`every: "1m"`, a run with a scripted one-word answer, quotas lifted), then aligns every schedule's
 * first occurrence on the same second a few seconds ahead (the hardest case: all fall due at once;
 * BENCH_SCHEDULE_SPREAD_MS spreads them instead), lets each fire its occurrences, pauses them all, waits
 * for the firings still pending, and reads `schedule_firings` (and the runs they started): firings per
 * occurrence, duplicates, missing, started, and lateness — `claimed_at` (the claiming transaction's
 * start) minus the occurrence, and the run's `created_at` (its transaction's start) and `ended_at`
 * minus the occurrence. Each instance reports the firing rows its claims inserted, so the lateness is
 * also split by instance.
 *
 * Env: BENCH_SCHEDULES (default 1000), BENCH_SCHEDULE_OCCURRENCES (2 each), BENCH_SCHEDULE_USERS (10,
 * two projects each), BENCH_SCHEDULE_INSTANCES (2), BENCH_SCHEDULE_LEAD_MS (5000: from the
 * instances being ready to the first occurrence), BENCH_SCHEDULE_SPREAD_MS (0: all due on the same second),
 * BENCH_SCHEDULE_PG_PREPARE (1: the instances prepare repeated statements, as deployed; 0: they run with
 * PLINTH_PG_PREPARE=false). When no occurrence is claimed 20 s after the first fell due, the bench says
 * so and reports what there is instead of waiting out the window.
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import pg from 'pg'
import { everyMs } from '../../src/schedules/index.js'
import { createProject, createSchedule, createUser, openStore } from '../../src/store/index.js'
import { ms, summarize, table, type Summary } from '../agent/stats.js'
import { startChildServer, type ChildServer } from '../lib/child-server.js'
import { createTempDatabase, createTempDir } from '../lib/resources.js'
import { unlimitedEnv } from '../lib/unlimited-env.js'

const every = '1m'
const periodMs = everyMs(every)!
const projectsPerUser = 2

interface Settings {
  schedules: number
  occurrences: number
  users: number
  instances: number
  leadMs: number
  spreadMs: number
  pgPrepare: boolean
}

interface InstanceStats {
  claimed: string[]
  started: number
  cpuMs: number
}

interface Instance {
  server: ChildServer
  stats(): Promise<InstanceStats>
}

/** One firing as measured: its lateness in ms after its occurrence (NaN where there is no run). */
interface FiringRow {
  id: string
  scheduleId: string
  occurrenceMs: number
  status: string
  runId: string | null
  claimMs: number
  runCreatedMs: number
  runEndedMs: number
  runStatus: string | null
}

function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const setting = (name: string, fallback: number, min: number): number => {
    const raw = env[name]
    if (raw === undefined || raw === '') return fallback
    const value = Number(raw)
    if (!Number.isInteger(value) || value < min)
      throw new Error(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(raw)}`)
    return value
  }
  const settings = {
    schedules: setting('BENCH_SCHEDULES', 1000, 1),
    occurrences: setting('BENCH_SCHEDULE_OCCURRENCES', 2, 1),
    users: setting('BENCH_SCHEDULE_USERS', 10, 1),
    instances: setting('BENCH_SCHEDULE_INSTANCES', 2, 1),
    leadMs: setting('BENCH_SCHEDULE_LEAD_MS', 5000, 0),
    spreadMs: setting('BENCH_SCHEDULE_SPREAD_MS', 0, 0),
    pgPrepare: setting('BENCH_SCHEDULE_PG_PREPARE', 1, 0) !== 0,
  }
  if (settings.spreadMs >= periodMs) throw new Error(`BENCH_SCHEDULE_SPREAD_MS must be under ${periodMs}`)
  return settings
}

export async function runScheduleBench(databaseUrl: string | undefined): Promise<void> {
  const settings = loadSettings()
  console.log(
    `schedule bench: ${settings.schedules} schedules every ${every} over ${settings.users * projectsPerUser} projects of ` +
      `${settings.users} users, ${settings.occurrences} occurrences each, ${settings.instances} instances on one pg database; ` +
      (settings.spreadMs > 0 ? `first occurrences spread over ${settings.spreadMs} ms` : 'all due on the same second') +
      `; prepared statements ${settings.pgPrepare ? 'on' : 'off (PLINTH_PG_PREPARE=false)'}`,
  )
  if (!databaseUrl) {
    console.log('  skipped: it needs Postgres (set TEST_DATABASE_URL or BENCH_DATABASE_URL)')
    return
  }
  const benchStarted = Date.now()
  const database = await createTempDatabase(databaseUrl)
  const dir = await createTempDir('plinth-bench-schedules-')
  const instances: Instance[] = []
  const client = new pg.Client({ connectionString: database.url })
  try {
    await seed(database.url, settings)
    await client.connect()
    const configPath = await writeConfig(dir.path)
    for (let index = 0; index < settings.instances; index++)
      instances.push(
        await startInstance(database.url, configPath, join(dir.path, `instance-${index}`), settings.pgPrepare),
      )
    console.log(
      `  ${settings.instances} instances ready (seeded in ${((Date.now() - benchStarted) / 1000).toFixed(1)} s)`,
    )

    // Every schedule's first occurrence on a whole second `leadMs` ahead (or spread after it).
    const first = Math.ceil((Date.now() + settings.leadMs) / 1000) * 1000
    await client.query(
      `update schedules set next_fire_at = to_timestamp($1::double precision / 1000)
         + make_interval(secs => ($2::double precision / 1000) * (row_number - 1) / greatest($3::int - 1, 1))
       from (select id as sid, row_number() over (order by id) from schedules) numbered
       where id = sid`,
      [first, settings.spreadMs, settings.schedules],
    )
    const last = first + (settings.occurrences - 1) * periodMs
    const expected = settings.schedules * settings.occurrences
    console.log(`  first occurrence at ${new Date(first).toISOString()}, last at ${new Date(last).toISOString()}`)

    // Until every expected occurrence is claimed and no longer pending, or the next one nears.
    const pauseBy = last + settings.spreadMs + periodMs - 5000
    let lastReport = 0
    for (;;) {
      const counts = await statusCounts(client, last + settings.spreadMs)
      const settled = counts.total - (counts.byStatus.pending ?? 0)
      if (Date.now() - lastReport >= 15_000) {
        lastReport = Date.now()
        console.log(`  t${signed(Date.now() - first)}: ${counts.total}/${expected} claimed, ${settled} settled`)
      }
      if (settled >= expected || Date.now() >= pauseBy) break
      if (counts.total === 0 && Date.now() >= first + settings.spreadMs + 20_000) {
        console.log(`  nothing claimed 20 s after the occurrences fell due (the instances' warnings above say why)`)
        break
      }
      await sleep(500)
    }
    await client.query(`update schedules set enabled = false, next_fire_at = null, updated_at = now()`)
    const pausedAt = Date.now()
    console.log(`  paused all at t${signed(pausedAt - first)}`)
    // Pending firings (a claim whose run is not made yet) settle, or are fired again after the 30 s lease.
    for (const drainBy = Date.now() + 45_000; Date.now() < drainBy; await sleep(500)) {
      const pending = await client.query<{ n: number }>(
        `select count(*)::int as n from schedule_firings where status = 'pending'`,
      )
      const active = await client.query<{ n: number }>(
        `select count(*)::int as n from runs where status in ('queued', 'running')`,
      )
      if (pending.rows[0]!.n === 0 && active.rows[0]!.n === 0) break
    }

    const stats = await Promise.all(instances.map((instance) => instance.stats()))
    const rows = await readFirings(client)
    const totals = await client.query<{ runs: number; conversations: number }>(
      `select (select count(*)::int from runs) as runs, (select count(*)::int from conversations) as conversations`,
    )
    report(settings, first, rows, stats, totals.rows[0]!, (Date.now() - benchStarted) / 1000)
  } finally {
    await client.end().catch(() => undefined)
    for (const instance of instances) await instance.server.stop()
    await dir.remove()
    await database.drop()
  }
}

/** Migrates the database, then writes the users, their projects and the schedules (not yet due). */
async function seed(url: string, settings: Settings): Promise<void> {
  const store = await openStore({ databaseUrl: url, poolSize: 4 })
  try {
    const projects: Array<{ ownerId: string; projectId: string }> = []
    for (let user = 0; user < settings.users; user++) {
      const owner = await createUser(store, `bench-${user}`)
      if ('error' in owner) throw new Error(`cannot create bench user: ${owner.error}`)
      for (let project = 0; project < projectsPerUser; project++) {
        const made = await store.transaction((tx) =>
          createProject(tx, owner.id, { name: `schedules ${user}.${project}` }),
        )
        projects.push({ ownerId: owner.id, projectId: made.id })
      }
    }
    const batches: Array<Promise<unknown>> = []
    for (let index = 0; index < settings.schedules; index++) {
      const { ownerId, projectId } = projects[index % projects.length]!
      batches.push(
        createSchedule(store, {
          ownerId,
          projectId,
          name: `bench ${index}`,
          every,
          target: { kind: 'run', input: 'tick' },
          nextFireAt: null,
        }),
      )
      if (batches.length === 4) await Promise.all(batches.splice(0))
    }
    await Promise.all(batches)
  } finally {
    await store.close()
  }
}

/** One scripted model answering one word: the runs end at once, so only firing is measured. */
async function writeConfig(dir: string): Promise<string> {
  const script = join(dir, 'quick.json')
  await writeFile(script, JSON.stringify({ turns: [{ text: 'Done.' }] }))
  const configPath = join(dir, 'plinth.config.json')
  await writeFile(configPath, JSON.stringify({ models: [{ id: 'quick', provider: 'scripted', script }] }, null, 2))
  return configPath
}

async function startInstance(
  databaseUrl: string,
  configPath: string,
  dataDir: string,
  pgPrepare: boolean,
): Promise<Instance> {
  const server = await startChildServer('bench/servers/plinth-schedule-server.ts', {
    env: {
      HOST: '127.0.0.1',
      PORT: '0',
      PLINTH_CONFIG: configPath,
      PLINTH_DATA_DIR: dataDir,
      PLINTH_LOG_LEVEL: 'warn',
      ...unlimitedEnv,
      DATABASE_URL: databaseUrl,
      ...(!pgPrepare && { PLINTH_PG_PREPARE: 'false' }),
    },
  })
  const statsUrl = server.info.statsUrl
  if (typeof statsUrl !== 'string') {
    await server.stop()
    throw new Error('plinth-schedule-server did not report a stats URL')
  }
  return { server, stats: async () => (await (await fetch(statsUrl)).json()) as InstanceStats }
}

async function statusCounts(
  client: pg.Client,
  lastMs: number,
): Promise<{ total: number; byStatus: Record<string, number> }> {
  const answer = await client.query<{ status: string; n: number }>(
    `select status, count(*)::int as n from schedule_firings
      where not manual and occurrence <= to_timestamp($1::double precision / 1000) group by status`,
    [lastMs],
  )
  const byStatus = Object.fromEntries(answer.rows.map((row) => [row.status, row.n]))
  return { total: answer.rows.reduce((sum, row) => sum + row.n, 0), byStatus }
}

async function readFirings(client: pg.Client): Promise<FiringRow[]> {
  const answer = await client.query<{
    id: string
    schedule_id: string
    occurrence_ms: number
    status: string
    run_id: string | null
    claim_ms: number
    run_created_ms: number | null
    run_ended_ms: number | null
    run_status: string | null
  }>(
    `select f.id, f.schedule_id, f.status, f.run_id, r.status as run_status,
            (extract(epoch from f.occurrence) * 1000)::float8 as occurrence_ms,
            (extract(epoch from f.claimed_at - f.occurrence) * 1000)::float8 as claim_ms,
            (extract(epoch from r.created_at - f.occurrence) * 1000)::float8 as run_created_ms,
            (extract(epoch from r.ended_at - f.occurrence) * 1000)::float8 as run_ended_ms
       from schedule_firings f left join runs r on r.id = f.run_id
      where not f.manual`,
  )
  return answer.rows.map((row) => ({
    id: row.id,
    scheduleId: row.schedule_id,
    occurrenceMs: Math.round(row.occurrence_ms),
    status: row.status,
    runId: row.run_id,
    claimMs: row.claim_ms,
    runCreatedMs: row.run_created_ms ?? Number.NaN,
    runEndedMs: row.run_ended_ms ?? Number.NaN,
    runStatus: row.run_status,
  }))
}

function report(
  settings: Settings,
  first: number,
  rows: FiringRow[],
  stats: InstanceStats[],
  totals: { runs: number; conversations: number },
  wallSeconds: number,
): void {
  const expected = settings.schedules * settings.occurrences
  // Occurrences past the measured ones (fired before the pause took hold) are counted apart.
  const last = first + (settings.occurrences - 1) * periodMs + settings.spreadMs
  const inWindow = rows.filter((row) => row.occurrenceMs <= last)
  const perOccurrence = new Map<string, number>()
  for (const row of inWindow) {
    const key = `${row.scheduleId} ${row.occurrenceMs}`
    perOccurrence.set(key, (perOccurrence.get(key) ?? 0) + 1)
  }
  const duplicates = [...perOccurrence.values()].reduce((sum, n) => sum + Math.max(0, n - 1), 0)
  const fired = inWindow.filter(
    (row) => row.status === 'started' || row.status === 'pending' || row.status === 'failed',
  )
  const firedOccurrences = new Set(fired.map((row) => `${row.scheduleId} ${row.occurrenceMs}`))
  const missing = expected - firedOccurrences.size
  const count = (status: string) => inWindow.filter((row) => row.status === status).length
  const started = inWindow.filter((row) => row.status === 'started' && row.runId !== null)
  const runIds = new Set(started.map((row) => row.runId))
  const completed = started.filter((row) => row.runStatus === 'completed').length

  console.log(
    '\n' +
      table(
        [
          `${settings.schedules} schedules × ${settings.occurrences}, ${settings.instances} instances`,
          'expected',
          'firings',
          'duplicates',
          'missing',
          'started',
          'pending',
          'failed',
          'missed',
          'extra',
          'runs',
          'completed',
          'conversations',
        ],
        [
          [
            'pg',
            String(expected),
            String(inWindow.length),
            String(duplicates),
            String(missing),
            String(started.length),
            String(count('pending')),
            String(count('failed')),
            String(count('missed')),
            String(rows.length - inWindow.length),
            `${totals.runs} (${runIds.size} distinct)`,
            String(completed),
            String(totals.conversations),
          ],
        ],
      ),
  )

  const latency = (label: string, values: number[]): string[] => {
    const summary: Summary = summarize(values.filter((value) => Number.isFinite(value)))
    return [label, String(summary.count), ms(summary.p50), ms(summary.p95), ms(summary.p99), ms(summary.max)]
  }
  const latenessRows: string[][] = []
  for (let occurrence = 0; occurrence < settings.occurrences; occurrence++) {
    const from = first + occurrence * periodMs
    const these = inWindow.filter((row) => row.occurrenceMs >= from && row.occurrenceMs <= from + settings.spreadMs)
    const label = settings.occurrences > 1 ? ` (#${occurrence + 1})` : ''
    latenessRows.push(
      latency(
        `claimed_at − occurrence${label}`,
        these.map((row) => row.claimMs),
      ),
    )
    latenessRows.push(
      latency(
        `run created − occurrence${label}`,
        these.map((row) => row.runCreatedMs),
      ),
    )
    latenessRows.push(
      latency(
        `run ended − occurrence${label}`,
        these.map((row) => row.runEndedMs),
      ),
    )
  }
  if (settings.occurrences > 1) {
    latenessRows.push(
      latency(
        'claimed_at − occurrence (all)',
        inWindow.map((row) => row.claimMs),
      ),
    )
    latenessRows.push(
      latency(
        'run created − occurrence (all)',
        inWindow.map((row) => row.runCreatedMs),
      ),
    )
    latenessRows.push(
      latency(
        'run ended − occurrence (all)',
        inWindow.map((row) => row.runEndedMs),
      ),
    )
  }
  console.log('\n' + table(['lateness (ms)', 'n', 'p50', 'p95', 'p99', 'max'], latenessRows))

  const byId = new Map(inWindow.map((row) => [row.id, row]))
  const instanceRows = stats.map((instance, index) => {
    const own = instance.claimed.map((id) => byId.get(id)).filter((row): row is FiringRow => row !== undefined)
    const claim = summarize(own.map((row) => row.claimMs))
    const run = summarize(own.map((row) => row.runCreatedMs).filter((value) => Number.isFinite(value)))
    return [
      `instance ${index + 1}`,
      String(own.length),
      String(instance.started),
      ms(claim.p50),
      ms(claim.p99),
      ms(run.p50),
      ms(run.p99),
      (instance.cpuMs / 1000).toFixed(1),
    ]
  })
  console.log(
    '\n' +
      table(
        [
          'by instance',
          'claimed',
          'runs tied',
          'claim p50 ms',
          'claim p99 ms',
          'run created p50 ms',
          'p99',
          'CPU s (whole life)',
        ],
        instanceRows,
      ),
  )

  const claimP99 = summarize(inWindow.map((row) => row.claimMs)).p99
  const runP99 = summarize(inWindow.map((row) => row.runCreatedMs).filter((value) => Number.isFinite(value))).p99
  const once = duplicates === 0 && missing === 0
  console.log(
    `\ntarget (every occurrence fired exactly once, p99 lateness ≤ 1 s): ` +
      `exactly once ${once ? 'met' : 'MISSED'}; claim p99 ${ms(claimP99)} ms ${claimP99 <= 1000 ? 'met' : 'MISSED'}; ` +
      `run created p99 ${ms(runP99)} ms ${runP99 <= 1000 ? 'met' : 'MISSED'}. Bench wall time ${wallSeconds.toFixed(0)} s.`,
  )
}

function signed(value: number): string {
  return `${value < 0 ? '−' : '+'}${(Math.abs(value) / 1000).toFixed(1)} s`
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
