// The run state machine, one test per row of `runTransitions` (src/store/run-states.ts; the table in
// docs/architecture.md#run-states): each brings a run into the row's `from` state through the real
// RunManager and store (no HTTP), makes the move the way the code does, and checks the run's status and
// the events appended to its log. The last block checks that moves outside the table are not made.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { RunRequestError } from '../../src/runmgr/index.js'
import {
  getRun,
  isRunTransition,
  listToolCalls,
  readEvents,
  runEvent,
  runTransitions,
  takeOverRun,
  type RunMove,
  type RunTransitionRule,
  type Store,
} from '../../src/store/index.js'
import { testDb } from '../../src/store/test-access.js'
import { openTestStore, testEngines } from '../helpers/engines.js'
import { waitFor } from '../helpers/waits.js'
import { eventCount, eventTypes, runKit, Scripted, startCore, untilRun, type Core } from './core.js'

// The events of a run's start and of each round's opening (docs/architecture.md#the-run-loop).
const created = ['run.created', 'message.created', 'message.completed']
const opened = ['run.status', 'round.started', 'message.created']
// A run's first round after a status that already says `running, thinking` (created, started from the
// queue, taken over): no second, unchanged run.status.
const firstOpened = ['round.started', 'message.created']

for (const engine of testEngines()) {
  describe(`run transitions on ${engine}`, () => {
    let store: Store
    let core: Core
    const model = new Scripted()
    const covered = new Set<RunTransitionRule>()

    beforeAll(async () => {
      store = await openTestStore(engine)
      core = await startCore(store, [model])
    })
    afterAll(async () => {
      await core?.close()
      await store?.close()
    })

    /** A test for the one row matching `from`/`to`/`by` (and `when`, where several do). */
    const row = (
      match: Pick<RunTransitionRule, 'from' | 'to' | 'by'> & { when?: RegExp },
      test: () => Promise<void>,
    ): void => {
      const rules = runTransitions.filter(
        (rule: RunTransitionRule) =>
          rule.from === match.from &&
          rule.to === match.to &&
          rule.by === match.by &&
          (!match.when || match.when.test(rule.when)),
      )
      if (rules.length !== 1) throw new Error(`${JSON.stringify(match)} matches ${rules.length} rows of runTransitions`)
      const rule = rules[0]!
      covered.add(rule)
      it(`${rule.from ?? '—'} → ${rule.to} (${rule.by}): ${rule.when}`, test)
    }

    const { start, waitingOnDraft, streaming, turnStatuses, statusEvents } = runKit(() => core, model)

    row({ from: null, to: 'running', by: 'create' }, async () => {
      model.script.setTurns([{ text: 'Hi.' }])
      const run = await start(await core.conversation())
      // Started in one statement: running, with a lease, its user message and events.
      expect(run).toMatchObject({ status: 'running', phase: 'thinking' })
      expect(run.leaseOwner).not.toBeNull()
      await untilRun(store, run.id, ['completed'])
      expect((await eventTypes(store, run.id)).slice(0, 4)).toEqual([...created, 'run.status'])
    })

    row({ from: null, to: 'queued', by: 'create' }, async () => {
      const conversation = await core.conversation()
      const { run: active } = await waitingOnDraft(conversation)
      // Without `ifActive` nothing is created: the active run is reported instead.
      const refused = await core.runs.createRun(conversation, core.owner.id, { input: 'again', model: 'scripted' })
      expect(refused).toEqual({ active: expect.objectContaining({ id: active.id }) })
      const queued = await start(conversation, { ifActive: 'enqueue' })
      expect(queued).toMatchObject({ status: 'queued', phase: null, leaseOwner: null, startedAt: null })
      expect(await eventTypes(store, queued.id)).toEqual(created)
      await core.runs.cancel(queued.id)
      await core.runs.cancel(active.id)
    })

    row({ from: 'queued', to: 'running', by: 'queue' }, async () => {
      const conversation = await core.conversation()
      const { run: active } = await waitingOnDraft(conversation)
      const queued = await start(conversation, { ifActive: 'enqueue' })
      // The active run ends; its end starts the queue's oldest run.
      await core.runs.cancel(active.id)
      const done = await untilRun(store, queued.id, ['completed'])
      expect(done.startedAt).not.toBeNull()
      expect(await eventTypes(store, queued.id)).toEqual([
        ...created,
        'run.status', // queued → running
        ...firstOpened,
        'message.completed',
        'run.status',
        'run.completed',
      ])
      expect((await statusEvents(queued.id))[0]).toMatchObject({ status: 'running', phase: 'thinking' })
    })

    row({ from: 'queued', to: 'cancelled', by: 'cancel' }, async () => {
      const conversation = await core.conversation()
      const { run: active } = await waitingOnDraft(conversation)
      const queued = await start(conversation, { ifActive: 'enqueue' })
      const cancelled = await core.runs.cancel(queued.id)
      expect(cancelled).toMatchObject({ status: 'cancelled', cancelReason: 'cancelled' })
      expect(await eventTypes(store, queued.id)).toEqual([...created, 'run.status', 'run.cancelled'])
      await core.runs.cancel(active.id)
    })

    row({ from: 'running', to: 'running', by: 'takeover' }, async () => {
      // Instance A drives the run and stops gracefully: the turn is closed and the lease released.
      const other = await core.instance()
      const run = await streaming(other)
      await other.stop()
      const released = await getRun(store, run.id)
      expect(released).toMatchObject({ status: 'running', leaseOwner: null, resumes: 0 })
      const before = (await eventTypes(store, run.id)).length
      // This instance's sweeper takes it over (a new lease) and drives it to the end. A released lease
      // is not counted toward maxResumes: a rolling restart is not the run's doing.
      expect(await core.runs.sweep()).toEqual({ resumed: 1, failed: 0 })
      const done = await untilRun(store, run.id, ['completed'])
      expect(done.resumes).toBe(0)
      expect((await eventTypes(store, run.id)).slice(before)).toEqual([
        'run.status', // resumed: true
        ...firstOpened,
        'message.completed',
        'run.status',
        'run.completed',
      ])
      expect((await statusEvents(run.id)).find((data) => data.resumed)).toMatchObject({ status: 'running' })
    })

    row({ from: 'running', to: 'requires_action', by: 'loop' }, async () => {
      const { run, decisionId } = await waitingOnDraft()
      const waiting = await getRun(store, run.id)
      // Waiting for a person: the lease is given up and the wait's clock starts.
      expect(waiting).toMatchObject({ status: 'requires_action', phase: null, leaseOwner: null })
      expect(waiting?.waitingSince).not.toBeNull()
      expect(waiting?.requiredAction).toBeTruthy()
      expect(await eventTypes(store, run.id)).toEqual([
        ...created,
        'run.status',
        ...firstOpened,
        'message.completed',
        'tool_call.created',
        'run.status', // tool_called
        'run.status', // tool_running
        'decision.required',
        'run.status', // requires_action
      ])
      await core.bus.expireDecision(decisionId)
    })

    row({ from: 'running', to: 'completed', by: 'loop' }, async () => {
      model.script.setTurns([{ text: 'The answer.' }])
      const run = await start(await core.conversation())
      const done = await untilRun(store, run.id, ['completed'])
      expect(done).toMatchObject({ phase: null, leaseOwner: null, iteration: 1 })
      expect(done.endedAt).not.toBeNull()
      expect(await eventTypes(store, run.id)).toEqual([
        ...created,
        'run.status',
        ...firstOpened,
        'message.completed',
        'run.status',
        'run.completed',
      ])
    })

    row({ from: 'running', to: 'failed', by: 'loop', when: /Model error/ }, async () => {
      model.failures = 1
      const run = await start(await core.conversation())
      const failed = await untilRun(store, run.id, ['failed'])
      expect(failed.error).toMatchObject({ code: 'upstream_error', upstreamStatus: 502 })
      expect(await eventTypes(store, run.id)).toEqual([
        ...created,
        'run.status',
        ...firstOpened,
        'message.completed', // the turn, status failed
        'run.status',
        'run.failed',
      ])
    })

    row({ from: 'running', to: 'failed', by: 'loop', when: /maxIterations/ }, async () => {
      // One round allowed; the last, tool-less call still calls a tool.
      model.script.setTurns([
        { toolCalls: [{ name: 'rdm__ping', arguments: {} }] },
        { toolCalls: [{ name: 'rdm__ping', arguments: {} }], evenWithoutTools: true },
      ])
      const run = await start(await core.conversation(), { maxIterations: 1 })
      const failed = await untilRun(store, run.id, ['failed'])
      expect(failed.error).toMatchObject({ code: 'iteration_cap' })
      const calls = await listToolCalls(store, run.id)
      expect(calls.map((call) => call.status)).toEqual(['ok', 'error'])
      const toolRound = ['message.completed', 'tool_call.created', 'run.status', 'run.status']
      expect(await eventTypes(store, run.id)).toEqual([
        ...created,
        'run.status',
        ...firstOpened,
        ...toolRound,
        'tool_call.started',
        'tool_call.completed',
        'run.status', // tool_done, with the next round's opening
        ...opened,
        ...toolRound,
        'tool_call.completed', // answered `error`: nothing more runs
        'run.status',
        'run.failed',
      ])
    })

    row({ from: 'running', to: 'failed', by: 'loop', when: /unexpected error/ }, async () => {
      // An observer that breaks its contract ("must not throw") stands in for a bug in the loop.
      let armed = true
      const other = await core.instance({
        observer: {
          modelCall: () => {
            if (armed) {
              armed = false
              throw new Error('a bug')
            }
          },
        },
      })
      model.script.setTurns([{ text: 'Hi.' }])
      const run = await start(await core.conversation(), {}, other)
      const failed = await untilRun(store, run.id, ['failed'])
      expect(failed.error).toMatchObject({ code: 'internal' })
      // The turn cut off by the failure is closed with the run's end, and announced.
      expect(await eventTypes(store, run.id)).toEqual([
        ...created,
        'run.status',
        ...firstOpened,
        'message.completed',
        'run.status',
        'run.failed',
      ])
      expect(await turnStatuses(run.conversationId)).toEqual(['interrupted'])
      await other.stop()
    })

    row({ from: 'running', to: 'failed', by: 'takeover' }, async () => {
      const first = await core.instance()
      const run = await streaming(first)
      await first.stop()
      // As if its driver had died instead of stopping: the lease ran out rather than being released.
      await testDb(store)
        .updateTable('runs')
        .set({ lease_owner: 'a-dead-instance', lease_expires_at: new Date(Date.now() - 1_000) })
        .where('id', '=', run.id)
        .execute()
      // A new instance allowing no resumes starts: its start-up sweep takes the run over and ends it.
      const second = await core.instance({ maxResumes: 0 })
      const failed = await untilRun(store, run.id, ['failed'])
      expect(failed).toMatchObject({ resumes: 1, error: { code: 'interrupted' } })
      expect((await eventTypes(store, run.id)).slice(-4)).toEqual([
        'message.completed', // the turn A's shutdown cut off, status interrupted
        'run.status', // taken over: resumed
        'run.status',
        'run.failed',
      ])
      await second.stop()
    })

    it('running → running (takeover) after graceful stops, however many: they do not use up maxResumes', async () => {
      let driving = await core.instance({ maxResumes: 0 })
      const run = await streaming(driving)
      // Each resume asks the cut-off turn again: it streams slowly each time.
      model.script.setTurns(Array.from({ length: 3 }, () => ({ text: 'w '.repeat(200), chunks: 200, delayMs: 25 })))
      const deltas = async () =>
        (await readEvents(store, { runId: run.id }, 0, 10_000)).filter((event) => event.type === 'message.delta').length
      // Three rolling restarts while the run streams: each instance stops gracefully, the next resumes it.
      for (let restart = 0; restart < 3; restart++) {
        await driving.stop()
        const before = await deltas()
        driving = await core.instance({ maxResumes: 0 })
        await waitFor(async () => (await deltas()) > before, { what: 'the resumed run to stream again' })
      }
      expect(await getRun(store, run.id)).toMatchObject({ status: 'running', resumes: 0, error: null })
      await core.runs.cancel(run.id)
      await driving.stop()
    })

    row({ from: 'running', to: 'cancelled', by: 'cancel', when: /while driven here/ }, async () => {
      const run = await streaming()
      const cancelled = await core.runs.cancel(run.id)
      expect(cancelled).toMatchObject({ status: 'cancelled', cancelReason: 'cancelled', leaseOwner: null })
      // The partial answer is kept, marked cancelled.
      const events = await readEvents(store, { runId: run.id }, 0, 10_000)
      const turn = events.filter((event) => event.type === 'message.completed').at(-1)
      expect(turn?.data).toMatchObject({ status: 'cancelled' })
      expect((await eventTypes(store, run.id)).slice(-3)).toEqual(['message.completed', 'run.status', 'run.cancelled'])
    })

    row({ from: 'running', to: 'cancelled', by: 'cancel', when: /another instance/ }, async () => {
      // Started before the run exists: an instance's start-up sweep would otherwise take it over.
      const other = await core.instance()
      const run = await streaming()
      const driving = model.signal!
      const cancelled = await other.cancel(run.id)
      expect(cancelled).toMatchObject({ status: 'cancelled', leaseOwner: null })
      // The notification reaches the driver here, which stops; its fenced writes would write nothing.
      await waitFor(() => driving.aborted, { what: 'the driver to stop' })
      // The turn it was streaming is closed by the cancel, and announced: a client streaming it sees it end.
      expect((await eventTypes(store, run.id)).slice(-3)).toEqual(['message.completed', 'run.status', 'run.cancelled'])
      const events = await readEvents(store, { runId: run.id }, 0, 10_000)
      const turn = events.filter((event) => event.type === 'message.completed').at(-1)
      expect(turn?.data).toMatchObject({ status: 'cancelled', toolCalls: null })
      expect(await turnStatuses(run.conversationId)).toEqual(['cancelled'])
      await other.stop()
    })

    row({ from: 'requires_action', to: 'running', by: 'answer' }, async () => {
      const { run, decisionId } = await waitingOnDraft()
      const before = (await eventTypes(store, run.id)).length
      const answer = await core.bus.decide(decisionId, core.owner.id, 'approve')
      expect(answer).toMatchObject({ ok: true, dispatch: { status: 'succeeded' } })
      await untilRun(store, run.id, ['completed'])
      expect((await eventTypes(store, run.id)).slice(before)).toEqual([
        'decision.resolved',
        'tool_call.started',
        // Still requires_action, awaiting nothing of anyone: the approved call runs (its requiredAction is empty).
        'run.status',
        'tool_call.completed',
        'run.status', // requires_action → running (tool_done)
        ...opened,
        'message.completed',
        'run.status',
        'run.completed',
      ])
      expect((await statusEvents(run.id)).at(-3)).toMatchObject({ status: 'running', phase: 'tool_done' })
      expect((await statusEvents(run.id)).at(-4)).toMatchObject({
        status: 'requires_action',
        requiredAction: { decisions: [], toolOutputs: [] },
      })
    })

    it('requires_action → running (answer), by tool outputs: the client answers its tool call', async () => {
      model.script.setTurns([{ toolCalls: [{ name: 'lookup', arguments: { q: 'x' } }] }])
      const clientTools = [{ name: 'lookup', description: 'Looks up', parameters: { type: 'object' } }]
      const run = await start(await core.conversation(), { clientTools })
      await untilRun(store, run.id, ['requires_action'])
      const [call] = await listToolCalls(store, run.id)
      expect(call).toMatchObject({ kind: 'client', status: 'awaiting_output' })
      const before = (await eventTypes(store, run.id)).length
      await core.runs.submitToolOutputs(run.id, [{ callId: call!.id, output: { found: 1 } }])
      await untilRun(store, run.id, ['completed'])
      expect((await eventTypes(store, run.id)).slice(before)).toEqual([
        'tool_call.completed',
        'run.status', // requires_action → running (tool_done)
        ...opened,
        'message.completed',
        'run.status',
        'run.completed',
      ])
    })

    row({ from: 'requires_action', to: 'expired', by: 'expiry', when: /pending decisions/ }, async () => {
      const { run, decisionId } = await waitingOnDraft()
      const before = (await eventTypes(store, run.id)).length
      await core.bus.expireDecision(decisionId)
      const expired = await untilRun(store, run.id, ['expired'])
      expect(expired.leaseOwner).toBeNull()
      // The decision expires, and in the same transaction the run's call and the run itself.
      expect((await eventTypes(store, run.id)).slice(before)).toEqual([
        'decision.resolved',
        'tool_call.completed',
        'run.status',
        'run.expired',
      ])
      expect((await listToolCalls(store, run.id))[0]?.status).toBe('expired')
    })

    row({ from: 'requires_action', to: 'expired', by: 'expiry', when: /PLINTH_ACTION_TTL/ }, async () => {
      const { run } = await waitingOnDraft()
      // Time is the subject: only `Date` is faked (moving with real time; timers and database I/O stay
      // real), and jumped past the TTL.
      vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true })
      try {
        vi.setSystemTime(Date.now() + 3_600_000 + 60_000)
        await core.runs.sweep()
      } finally {
        vi.useRealTimers()
      }
      const expired = await getRun(store, run.id)
      expect(expired?.status).toBe('expired')
      expect(await eventTypes(store, run.id)).toContain('run.expired')
    })

    row({ from: 'requires_action', to: 'cancelled', by: 'cancel' }, async () => {
      const { run, decisionId } = await waitingOnDraft()
      const before = (await eventTypes(store, run.id)).length
      const cancelled = await core.runs.cancel(run.id)
      expect(cancelled).toMatchObject({ status: 'cancelled', cancelReason: 'cancelled' })
      expect((await eventTypes(store, run.id)).slice(before)).toEqual([
        'decision.resolved', // the run's decision can no longer be answered: before its end, on its stream
        'tool_call.completed',
        'run.status',
        'run.cancelled',
      ])
      expect(await core.bus.decide(decisionId, core.owner.id, 'approve')).toMatchObject({
        ok: false,
        error: { code: 'decision_expired' },
      })
    })

    row({ from: 'failed', to: 'running', by: 'resume' }, async () => {
      model.failures = 1
      const run = await start(await core.conversation())
      await untilRun(store, run.id, ['failed'])
      const before = (await eventTypes(store, run.id)).length
      const resumed = await core.runs.resume(run.id)
      expect(resumed).toMatchObject({ status: 'running', error: null })
      await untilRun(store, run.id, ['completed'])
      expect((await eventTypes(store, run.id)).slice(before)).toEqual([
        'run.status', // failed → running
        ...opened,
        'message.completed',
        'run.status',
        'run.completed',
      ])
    })

    it('has a test for every row of runTransitions', () => {
      expect(runTransitions.filter((rule) => !covered.has(rule))).toEqual([])
    })

    describe('moves the table does not list are not made', () => {
      it('cancelling or resuming a completed run changes nothing', async () => {
        model.script.setTurns([{ text: 'Done.' }])
        const run = await start(await core.conversation())
        const done = await untilRun(store, run.id, ['completed'])
        const count = await eventCount(store, run.id)
        expect(isRunTransition('completed', 'cancelled')).toBe(false)
        expect(await core.runs.cancel(run.id)).toEqual(done)
        await expect(core.runs.resume(run.id)).rejects.toMatchObject({ code: 'run_not_resumable' })
        await expect(core.runs.submitToolOutputs(run.id, [])).rejects.toBeInstanceOf(RunRequestError)
        expect(await getRun(store, run.id)).toEqual(done)
        expect(await eventCount(store, run.id)).toBe(count)
      })

      it('a write fenced by a stale lease owner, or a takeover of a held lease, writes nothing', async () => {
        const run = await streaming()
        const driving = await getRun(store, run.id)
        const stale = { runId: run.id, owner: `${driving!.leaseOwner}-stale`, expiresAt: new Date(Date.now() + 60_000) }
        const ending = { move: { from: ['running'], to: 'completed' }, ended: true } as const
        const written = await store.transition(stale, ending, [], [runEvent(run, 'run.completed', {})])
        expect(written).toBeUndefined()
        const lease = { owner: 'someone-else', expiresAt: new Date(Date.now() + 60_000) }
        expect(await store.transaction((tx) => takeOverRun(tx, run.id, lease, new Date()))).toBeUndefined()
        const after = await getRun(store, run.id)
        expect(after).toMatchObject({ status: 'running', leaseOwner: driving!.leaseOwner, resumes: 0 })
        expect(await eventTypes(store, run.id)).not.toContain('run.completed')
        await core.runs.cancel(run.id)
      })

      it('an unlisted move does not compile', () => {
        // @ts-expect-error -- completed → running is not in runTransitions, so RunMove does not admit it
        const move: RunMove = { from: ['completed'], to: 'running' }
        expect(isRunTransition(move.from[0]!, move.to)).toBe(false)
      })
    })
  })
}
