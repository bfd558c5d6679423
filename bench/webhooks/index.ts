/**
 * The webhook benches (`BENCH_ONLY=webhooks npm run bench`), on PGlite and (with a database URL) on pg:
 *
 * 1. Commit → delivery: events a webhook reports are appended one after another (each its own
 *    statement, as the run manager appends a run's end) and a local receiver records when each arrives;
 *    the latency is arrival minus the moment the append returned (committed). The deliverer, the
 *    receiver and the producer share this process, as a server's loop would be shared.
 * 2. The outbox's cost: one `run.completed` append timed in a project with no webhook, one, and five
 *    subscribed (the outbox CTE rides in the event's statement), beside a type no webhook reports (no
 *    CTE at all), interleaved. The deliverer is not running then, so only the insert is measured.
 *
 * Env: BENCH_WEBHOOK_EVENTS (default 1000), BENCH_WEBHOOK_RATE (events/s; default 0 = back to back),
 * BENCH_WEBHOOK_INSERTS (default 1000 per column, after 100 warm-up).
 */
import { createServer } from 'node:http'
import { once } from 'node:events'
import { createProject, createUser, insertWebhook, newId, openStore, type Store } from '../../src/store/index.js'
import { defaultWebhookSettings, WebhookDeliverer } from '../../src/webhooks/index.js'
import { ms, summarize, table } from '../agent/stats.js'
import { createTempDatabase, createTempDir } from '../lib/resources.js'

export async function runWebhookBench(databaseUrl: string | undefined): Promise<void> {
  const events = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 1000)
  const rate = Number(process.env.BENCH_WEBHOOK_RATE ?? 0)
  const inserts = Number(process.env.BENCH_WEBHOOK_INSERTS ?? 1000)
  console.log(
    `webhook bench: ${events} events to a local receiver (${rate > 0 ? `${rate}/s` : 'back to back'}); outbox cost over ${inserts} appends per column`,
  )
  const latencyRows: string[][] = []
  const costRows: string[][] = []
  for (const engine of databaseUrl ? (['PGlite', 'pg'] as const) : (['PGlite'] as const)) {
    const temp = engine === 'pg' ? await createTempDatabase(databaseUrl!) : await createTempDir('plinth-bench-hooks-')
    const store: Store =
      engine === 'pg'
        ? await openStore({ databaseUrl: (temp as { url: string }).url, poolSize: 8 })
        : await openStore({ dataDir: (temp as { path: string }).path })
    try {
      const owner = await createUser(store, 'bench')
      if ('error' in owner) throw new Error('user')
      const project = () => store.transaction((tx) => createProject(tx, owner.id, { name: 'bench' }))
      if (events > 0)
        latencyRows.push([engine, ...(await commitToDelivery(store, owner.id, (await project()).id, events, rate))])
      costRows.push([
        engine,
        ...(await outboxCost(
          store,
          owner.id,
          [await project(), await project(), await project()].map((made) => made.id),
          inserts,
        )),
      ])
    } finally {
      await store.close()
      await ('drop' in temp ? temp.drop() : temp.remove())
    }
  }
  console.log(table(['commit → delivery (ms)', 'delivered', 'p50', 'p95', 'p99', 'max', 'events/s'], latencyRows))
  console.log('')
  console.log(
    table(
      [
        'event append (ms)',
        'no outbox p50',
        'p95',
        '0 hooks p50',
        'p95',
        '1 hook p50',
        'p95',
        '5 hooks p50',
        'p95',
        'added by 1 hook p50',
        'p95',
      ],
      costRows,
    ),
  )
}

async function commitToDelivery(
  store: Store,
  ownerId: string,
  projectId: string,
  count: number,
  rate: number,
): Promise<string[]> {
  const arrived = new Map<number, number>()
  const receiver = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const at = performance.now()
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data: { n: number } }
      if (!arrived.has(body.data.n)) arrived.set(body.data.n, at)
      response.writeHead(204).end()
    })
  })
  receiver.listen(0, '127.0.0.1')
  await once(receiver, 'listening')
  const port = (receiver.address() as { port: number }).port
  const deliverer = new WebhookDeliverer(store, { ...defaultWebhookSettings, allowPrivate: true })
  try {
    await insertWebhook(
      store,
      {
        id: newId(),
        projectId,
        url: `http://127.0.0.1:${port}/hook`,
        events: ['run.completed'],
        description: null,
        secret: 'whsec_' + Buffer.alloc(32, 7).toString('base64'),
        createdBy: ownerId,
      },
      50,
    )
    await deliverer.start()
    const committed = new Map<number, number>()
    const started = performance.now()
    for (let n = 0; n < count; n++) {
      if (rate > 0) {
        const due = started + (n * 1000) / rate
        if (due > performance.now()) await new Promise((resolve) => setTimeout(resolve, due - performance.now()))
      }
      // Events come from I/O (requests, model streams): the loop turns between them, as in a server.
      await new Promise((resolve) => setImmediate(resolve))
      // No such run: the body falls back to the event's data, which carries `n`.
      await store.appendEvents([
        {
          type: 'run.completed',
          projectId,
          runId: null,
          data: { runId: `bench-${n}`, n, usage: { inputTokens: 1, outputTokens: 1 } },
        },
      ])
      committed.set(n, performance.now())
    }
    for (const deadline = Date.now() + 60_000; arrived.size < count && Date.now() < deadline;)
      await new Promise((resolve) => setTimeout(resolve, 10))
    const elapsed = (Math.max(...arrived.values()) - started) / 1000
    const latencies = [...arrived].map(([n, at]) => at - committed.get(n)!)
    const summary = summarize(latencies)
    return [
      `${arrived.size}/${count}`,
      ms(summary.p50),
      ms(summary.p95),
      ms(summary.p99),
      ms(summary.max),
      (arrived.size / elapsed).toFixed(0),
    ]
  } finally {
    await deliverer.stop()
    receiver.closeAllConnections()
    receiver.close()
  }
}

async function outboxCost(store: Store, ownerId: string, projects: string[], count: number): Promise<string[]> {
  const [bare, one, five] = projects as [string, string, string]
  const hook = (projectId: string) =>
    insertWebhook(
      store,
      {
        id: newId(),
        projectId,
        url: 'https://example.com/hook',
        events: ['run.completed', 'run.failed'],
        description: null,
        secret: 'whsec_AAAA',
        createdBy: ownerId,
      },
      50,
    )
  await hook(one)
  for (let index = 0; index < 5; index++) await hook(five)
  const append = (projectId: string, type: string, n: number) =>
    store.appendEvents([{ type, projectId, data: { runId: `bench-${n}`, usage: { inputTokens: 1, outputTokens: 1 } } }])
  // run.expired: the same shape, a type no webhook reports (no outbox CTE in the statement).
  const columns = [
    ['plain', () => append(bare, 'run.expired', 0)],
    ['none', () => append(bare, 'run.completed', 0)],
    ['one', () => append(one, 'run.completed', 0)],
    ['five', () => append(five, 'run.completed', 0)],
  ] as const
  const timings: Record<string, number[]> = { plain: [], none: [], one: [], five: [] }
  for (let index = 0; index < count + 100; index++) {
    for (const [name, call] of columns) {
      const started = performance.now()
      await call()
      if (index >= 100) timings[name]!.push(performance.now() - started)
    }
  }
  const [plain, none, single, many] = [timings.plain!, timings.none!, timings.one!, timings.five!].map(summarize) as [
    ReturnType<typeof summarize>,
    ReturnType<typeof summarize>,
    ReturnType<typeof summarize>,
    ReturnType<typeof summarize>,
  ]
  return [
    ms(plain.p50),
    ms(plain.p95),
    ms(none.p50),
    ms(none.p95),
    ms(single.p50),
    ms(single.p95),
    ms(many.p50),
    ms(many.p95),
    ms(single.p50 - plain.p50),
    ms(single.p95 - plain.p95),
  ]
}
