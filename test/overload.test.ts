import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import { OverloadGuard } from '../src/server/overload.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor } from './helpers/waits.js'

// Overload is shed, not timed out (docs/guides/scaling.md#overload): while the instance's event loop runs
// late, a new run is refused at once — 503 overloaded with Retry-After, nothing created — and reads go
// on; once the loop is on time again, runs are accepted.
describe('overload', () => {
  let store: Store
  let server: TestServer
  let user: TestUser
  let conversation: string

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      models: [new ScriptedModel({ id: 'quick', turns: [{ text: 'Done.' }], whenExhausted: 'loop' })],
      overload: { maxEventLoopDelayMs: 150, retryAfterSeconds: 3 },
    })
    user = await server.createUser()
    const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'o' } })).body.id
    conversation = (
      await server.request('POST', `/api/projects/${project}/conversations`, { token: user.token, body: {} })
    ).body.id
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const runs = async (): Promise<number> =>
    (await server.request('GET', `/api/conversations/${conversation}/runs`, { token: user.token })).body.items.length

  it('a new run is refused 503 overloaded with Retry-After while the loop is late, and accepted after', async () => {
    const startRun = async (): Promise<{ status: number; body: { status: string } } | null> => {
      const answer = await server.request('POST', `/api/conversations/${conversation}/runs?wait=true`, {
        token: user.token,
        body: { input: 'again' },
      })
      return answer.status === 201 ? answer : null
    }
    // Setting up (the embedded database in this process) may itself have made the loop late.
    await waitFor(startRun, { timeoutMs: 30_000, intervalMs: 500, what: 'a first run to be accepted' })
    // The server shares this process's event loop: hold it for 400 ms, as a saturated instance would.
    const until = Date.now() + 400
    while (Date.now() < until) {
      // busy
    }
    const refused = await fetch(`${server.url}/api/conversations/${conversation}/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${user.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'refused' }),
    })
    const problem = (await refused.json()) as { code: string; detail: string }
    expect([refused.status, problem.code, refused.headers.get('retry-after')]).toEqual([503, 'overloaded', '3'])
    expect(problem.detail).toMatch(/no run was started/)
    expect(await runs()).toBe(1)
    // Reads are not refused.
    expect((await server.request('GET', '/api/me', { token: user.token })).status).toBe(200)
    // Within two quiet windows the loop is on time again and the same request is accepted.
    const accepted = await waitFor(startRun, {
      timeoutMs: 30_000,
      intervalMs: 500,
      what: 'the run to be accepted once the loop is on time',
    })
    expect(accepted.body.status).toBe('completed')
    expect(await runs()).toBe(2)
  })

  it('a statement waiting for the database refuses new runs too, while the loop is on time', async () => {
    // What the embedded database's queue or an exhausted pool looks like from the server: a statement
    // that takes long to come back while the event loop has nothing to do.
    const guard = new OverloadGuard({
      maxEventLoopDelayMs: 0,
      maxDatabaseWaitMs: 200,
      maxAdmitMs: 0,
      maxActiveRuns: 0,
      adaptiveCapSeconds: 0,
      retryAfterSeconds: 1,
    })
    let held: (() => void) | undefined
    let hold = true
    guard.start(() => (hold ? new Promise<void>((resolve) => (held = resolve)) : Promise.resolve()))
    try {
      const reason = await waitFor(() => guard.overloadReason ?? null, {
        timeoutMs: 15_000,
        intervalMs: 50,
        what: 'the database wait to count',
      })
      expect(reason).toMatch(/a statement waits \d+ ms for the database/)
      hold = false
      held?.()
      // The next probe comes back at once: runs are accepted again.
      await waitFor(() => (guard.overloaded ? null : true), {
        timeoutMs: 15_000,
        intervalMs: 50,
        what: 'the database wait to pass',
      })
    } finally {
      guard.stop()
    }
  })

  it('accepting runs slowly refuses further ones until they are accepted at pace again', async () => {
    const guard = new OverloadGuard({
      maxEventLoopDelayMs: 0,
      maxDatabaseWaitMs: 0,
      maxAdmitMs: 200,
      maxActiveRuns: 0,
      adaptiveCapSeconds: 0,
      retryAfterSeconds: 1,
    })
    guard.start()
    try {
      guard.admitStarted('slow')
      guard.admitStarted('later')
      const reason = await waitFor(() => guard.overloadReason ?? null, {
        timeoutMs: 15_000,
        intervalMs: 20,
        what: 'a slow acceptance to count',
      })
      expect(reason).toMatch(/accepting a run takes \d+ ms/)
      guard.admitEnded('slow')
      guard.admitEnded('later')
      // The last acceptance was slow: refused for a while after it, then accepted again.
      expect(guard.overloaded).toBe(true)
      await waitFor(() => (guard.overloaded ? null : true), { timeoutMs: 15_000, intervalMs: 50, what: 'pace again' })
    } finally {
      guard.stop()
    }
  })

  it('an instance driving its limit of runs refuses new ones until one ends', async () => {
    const guard = new OverloadGuard({
      maxEventLoopDelayMs: 0,
      maxDatabaseWaitMs: 0,
      maxAdmitMs: 0,
      maxActiveRuns: 3,
      adaptiveCapSeconds: 0,
      retryAfterSeconds: 1,
    })
    let driven = 2
    guard.start(undefined, () => ({ driven, ended: 0 }))
    try {
      expect(guard.overloaded).toBe(false)
      driven = 3
      expect(guard.overloadReason).toBe('it drives 3 runs, its limit')
      driven = 2
      expect(guard.overloaded).toBe(false)
    } finally {
      guard.stop()
    }
  })

  it('concurrent creations in one conversation count as the one run they can start', async () => {
    const guard = new OverloadGuard({
      maxEventLoopDelayMs: 0,
      maxDatabaseWaitMs: 0,
      maxAdmitMs: 0,
      maxActiveRuns: 2,
      adaptiveCapSeconds: 0,
      retryAfterSeconds: 1,
    })
    guard.start(undefined, () => ({ driven: 1, ended: 0 }))
    try {
      guard.admitStarted('first', 'c1')
      expect(guard.reasonToRefuse('c2')).toBe('it drives 2 runs, its limit')
      // Another creation in c1 starts no second run there: it is let through (to its 409 run_active).
      expect(guard.reasonToRefuse('c1')).toBeUndefined()
      guard.admitStarted('second', 'c1')
      expect(guard.runsInFlight).toBe(2)
      guard.admitEnded('first')
      expect(guard.runsInFlight).toBe(2)
      guard.admitEnded('second')
      expect(guard.runsInFlight).toBe(1)
      expect(guard.reasonToRefuse('c2')).toBeUndefined()
    } finally {
      guard.stop()
    }
  })

  it('over HTTP: five creations at once in one conversation of a capped instance: one run, four 409 run_active', async () => {
    const capped = await startTestServer(store, {
      models: [
        new ScriptedModel({ id: 'slow', turns: [{ text: 'one two', chunks: 2, delayMs: 500 }], whenExhausted: 'loop' }),
      ],
      overload: { maxEventLoopDelayMs: 0, maxDatabaseWaitMs: 0, maxActiveRuns: 1, retryAfterSeconds: 1 },
    })
    try {
      const owner = await capped.createUser()
      const project = (await capped.request('POST', '/api/projects', { token: owner.token, body: { name: 'burst' } }))
        .body.id
      const id = (
        await capped.request('POST', `/api/projects/${project}/conversations`, { token: owner.token, body: {} })
      ).body.id
      const answers = await Promise.all(
        Array.from({ length: 5 }, (_, i) =>
          capped.request('POST', `/api/conversations/${id}/runs`, { token: owner.token, body: { input: `go ${i}` } }),
        ),
      )
      const statuses = answers.map((answer) => `${answer.status} ${answer.body.code ?? answer.body.status}`).sort()
      expect(statuses).toEqual(['201 running', ...Array(4).fill('409 run_active')].sort())
      // Ended before the server closes: a run left running would be taken over by the next test's server.
      const started = answers.find((answer) => answer.status === 201)!.body.id
      const ended = await capped.request('GET', `/api/runs/${started}?wait=true`, { token: owner.token })
      expect(ended.body.status).toBe('completed')
    } finally {
      await capped.close()
    }
  })

  it('over HTTP: while the instance drives its limit of runs, a new one is refused; once one ends, accepted', async () => {
    const capped = await startTestServer(store, {
      models: [
        new ScriptedModel({
          id: 'slow',
          turns: [{ text: 'one two three four five six', chunks: 6, delayMs: 250 }],
          whenExhausted: 'loop',
        }),
      ],
      overload: { maxEventLoopDelayMs: 0, maxDatabaseWaitMs: 0, maxActiveRuns: 1, retryAfterSeconds: 1 },
    })
    try {
      const owner = await capped.createUser()
      const project = (await capped.request('POST', '/api/projects', { token: owner.token, body: { name: 'cap' } }))
        .body.id
      const open = async (): Promise<string> =>
        (await capped.request('POST', `/api/projects/${project}/conversations`, { token: owner.token, body: {} })).body
          .id
      const [first, second] = [await open(), await open()]
      const running = await capped.request('POST', `/api/conversations/${first}/runs`, {
        token: owner.token,
        body: { input: 'go' },
      })
      expect(running.status).toBe(201)
      const refused = await capped.request('POST', `/api/conversations/${second}/runs`, {
        token: owner.token,
        body: { input: 'go' },
      })
      expect([refused.status, refused.body.code]).toEqual([503, 'overloaded'])
      expect(refused.body.detail).toMatch(/drives 1 runs/)
      // In the conversation whose run is in flight, a new one would add none: it is told the run is active.
      const again = await capped.request('POST', `/api/conversations/${first}/runs`, {
        token: owner.token,
        body: { input: 'again' },
      })
      expect([again.status, again.body.code]).toEqual([409, 'run_active'])
      // An operator sees it on /metrics: the run in flight, the cap, the refusal.
      const metrics = (await capped.request('GET', '/metrics')).body as string
      expect(metrics).toMatch(/^plinth_runs_in_flight 1$/m)
      expect(metrics).toMatch(/^plinth_run_cap 1$/m)
      expect(metrics).toMatch(/^plinth_runs_refused_overloaded_total 1$/m)
      const accepted = await waitFor(
        async () => {
          const answer = await capped.request('POST', `/api/conversations/${second}/runs?wait=true`, {
            token: owner.token,
            body: { input: 'go' },
          })
          return answer.status === 201 ? answer : null
        },
        { timeoutMs: 30_000, intervalMs: 250, what: 'the second run to be accepted once the first ended' },
      )
      expect(accepted.body.status).toBe('completed')
    } finally {
      await capped.close()
    }
  })
})
