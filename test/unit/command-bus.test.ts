// The command bus pipeline through `CommandBus.dispatch` itself (docs/architecture.md#the-command-bus):
// resolve → idempotency → authorize → validate → risk → gate → decision → handler, each step recorded in
// the dispatch's row and appended to the hash-chained audit log. The commands are the bundled rdm
// plugin's; the bus is wired by the composition root (test/unit/core.ts), over a real store, no HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { verifyAuditChain, type DispatchOutcome, type DispatchRequest } from '../../src/cmdbus/index.js'
import { getDispatch, type Store } from '../../src/store/index.js'
import { openTestStore, testEngines } from '../helpers/engines.js'
import { Scripted, startCore, type Core } from './core.js'
import { testDb } from '../../src/store/test-access.js'

for (const engine of testEngines()) {
  describe(`command bus dispatch on ${engine}`, () => {
    let store: Store
    let core: Core

    beforeAll(async () => {
      store = await openTestStore(engine)
      core = await startCore(store, [new Scripted()])
    })
    afterAll(async () => {
      // Whatever the tests did, the audit log is still one unbroken chain.
      if (store) expect(await verifyAuditChain(store)).toMatchObject({ ok: true })
      await core?.close()
      await store?.close()
    })

    /** A person pressing a button: entrance `button`, acting for themselves. */
    const press = (commandId: string, params: DispatchRequest['params'], extra: Partial<DispatchRequest> = {}) =>
      core.bus.dispatch({
        commandId,
        params,
        entrance: 'button',
        actor: { type: 'user', id: core.owner.id, onBehalfOf: core.owner.id },
        ...extra,
      })
    /** The audit steps recorded for a dispatch, in order. */
    const steps = async (dispatchId: string | null) =>
      (
        await testDb(store)
          .selectFrom('audit_log')
          .select('step')
          .where('dispatch_id', '=', dispatchId ?? '')
          .orderBy('id')
          .execute()
      ).map((row) => row.step)
    const count = async (table: 'dispatches' | 'audit_log' | 'knowledge_items') =>
      Number(
        (
          await testDb(store)
            .selectFrom(table)
            .select((eb) => eb.fn.countAll<string>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      )
    const dispatchId = (outcome: DispatchOutcome): string => {
      if (!outcome.dispatchId) throw new Error(`no dispatch: ${JSON.stringify(outcome)}`)
      return outcome.dispatchId
    }

    it('an unknown command is refused before anything is recorded', async () => {
      const [dispatches, entries] = [await count('dispatches'), await count('audit_log')]
      const outcome = await press('rdm.nope', {})
      expect(outcome).toMatchObject({ status: 'failed', dispatchId: null, error: { code: 'unknown_command' } })
      expect([await count('dispatches'), await count('audit_log')]).toEqual([dispatches, entries])
    })

    it('invalid params fail validation: the dispatch is recorded failed, with its requested and finished entries', async () => {
      const outcome = await press('rdm.ping', { target: 5, extra: true })
      expect(outcome).toMatchObject({ status: 'failed', error: { code: 'validation_failed' } })
      expect(outcome.status === 'failed' && outcome.error.errors?.length).toBeGreaterThan(0)
      const id = dispatchId(outcome)
      expect(await getDispatch(store, id)).toMatchObject({ status: 'failed', commandId: 'rdm.ping' })
      expect(await steps(id)).toEqual(['requested', 'finished'])
    })

    it('a low-risk command runs at once and is audited once: requested, running, finished', async () => {
      const dispatches = await count('dispatches')
      const outcome = await press('rdm.ping', { target: 'unit' })
      expect(outcome).toMatchObject({ status: 'succeeded', result: { pong: true, target: 'unit' } })
      const id = dispatchId(outcome)
      expect(await count('dispatches')).toBe(dispatches + 1)
      expect(await getDispatch(store, id)).toMatchObject({ status: 'succeeded', risk: 'low', entrance: 'button' })
      expect(await steps(id)).toEqual(['requested', 'running', 'finished'])
    })

    describe('a command that always asks (rdm.draft.compose: high risk, confirm)', () => {
      const compose = (title: string) =>
        press('rdm.draft.compose', { title, body: 'text' }, { projectId: core.project.id })

      it('yields a pending decision; approved, it runs exactly once', async () => {
        const items = await count('knowledge_items')
        const asked = await compose('approved draft')
        if (asked.status !== 'awaiting_decision') throw new Error(`expected a decision: ${JSON.stringify(asked)}`)
        expect(asked.decision).toMatchObject({ status: 'pending', commandId: 'rdm.draft.compose', risk: 'high' })
        expect(asked.decision.preview).toContain('approved draft')
        expect(await steps(asked.dispatchId)).toEqual(['requested', 'awaiting_decision'])
        expect(await count('knowledge_items')).toBe(items)

        const approved = await core.bus.decide(asked.decision.id, core.owner.id, 'approve')
        expect(approved).toMatchObject({
          ok: true,
          decision: { status: 'approved' },
          dispatch: { status: 'succeeded' },
        })
        expect(await count('knowledge_items')).toBe(items + 1)
        expect(await steps(asked.dispatchId)).toEqual([
          'requested',
          'awaiting_decision',
          'decided',
          'running',
          'finished',
        ])

        // Answered again: the stored outcome, the handler does not run again; the other answer conflicts.
        const again = await core.bus.decide(asked.decision.id, core.owner.id, 'approve')
        expect(again).toMatchObject({ ok: true, dispatch: { status: 'succeeded', dispatchId: asked.dispatchId } })
        const reject = await core.bus.decide(asked.decision.id, core.owner.id, 'reject')
        expect(reject).toMatchObject({ ok: false, error: { code: 'decision_conflict' } })
        expect(await count('knowledge_items')).toBe(items + 1)
        expect(await steps(asked.dispatchId)).toHaveLength(5)
      })

      it('rejected, it never runs', async () => {
        const items = await count('knowledge_items')
        const asked = await compose('rejected draft')
        if (asked.status !== 'awaiting_decision') throw new Error(`expected a decision: ${JSON.stringify(asked)}`)
        const rejected = await core.bus.decide(asked.decision.id, core.owner.id, 'reject')
        expect(rejected).toMatchObject({ ok: true, decision: { status: 'rejected' }, dispatch: { status: 'rejected' } })
        expect(await getDispatch(store, asked.dispatchId)).toMatchObject({ status: 'rejected' })
        expect(await steps(asked.dispatchId)).toEqual(['requested', 'awaiting_decision', 'decided'])
        const late = await core.bus.decide(asked.decision.id, core.owner.id, 'approve')
        expect(late).toMatchObject({ ok: false, error: { code: 'decision_conflict' } })
        expect(await count('knowledge_items')).toBe(items)
      })

      it('with approvalPolicy dontAsk nobody can confirm: denied, gated then finished', async () => {
        const outcome = await press(
          'rdm.draft.compose',
          { title: 'unattended', body: 'text' },
          { projectId: core.project.id, approvalPolicy: 'dontAsk' },
        )
        expect(outcome).toMatchObject({ status: 'rejected', error: { code: 'denied' } })
        expect(await steps(dispatchId(outcome))).toEqual(['requested', 'gated', 'finished'])
      })
    })

    describe('idempotency keys', () => {
      it('a repeat replays the first dispatch; the same key for other params is refused', async () => {
        const first = await press('rdm.ping', { target: 'once' }, { idempotencyKey: 'unit-key-1' })
        expect(first.status).toBe('succeeded')
        const dispatches = await count('dispatches')
        const repeat = await press('rdm.ping', { target: 'once' }, { idempotencyKey: 'unit-key-1' })
        // The same dispatch and result (its `at` too): the handler did not run again.
        expect(repeat).toEqual({ ...first, replayed: true })
        const other = await press('rdm.ping', { target: 'twice' }, { idempotencyKey: 'unit-key-1' })
        expect(other).toMatchObject({ status: 'failed', dispatchId: null, error: { code: 'idempotency_key_reused' } })
        expect(await count('dispatches')).toBe(dispatches)
        expect(await steps(dispatchId(first))).toEqual(['requested', 'running', 'finished'])
      })

      it('a repeat while the decision is pending replays the pending decision', async () => {
        const params = { title: 'keyed draft', body: 'text' }
        const extra = { projectId: core.project.id, idempotencyKey: 'unit-key-2' }
        const asked = await press('rdm.draft.compose', params, extra)
        const repeat = await press('rdm.draft.compose', params, extra)
        expect(repeat).toMatchObject({ status: 'awaiting_decision', dispatchId: asked.dispatchId, replayed: true })
        if (asked.status === 'awaiting_decision') await core.bus.expireDecision(asked.decision.id)
      })
    })

    it('a handler that throws is recorded as failed with its error', async () => {
      // rdm.member.add is medium risk, so a button press outside a conversation (manual mode) asks first;
      // approved, its handler throws `project_required` (it was dispatched without a project).
      const asked = await press('rdm.member.add', { userId: 'someone' })
      if (asked.status !== 'awaiting_decision') throw new Error(`expected a decision: ${JSON.stringify(asked)}`)
      expect(asked.decision.reasons).toEqual(['medium risk in manual permission mode'])
      const approved = await core.bus.decide(asked.decision.id, core.owner.id, 'approve')
      expect(approved).toMatchObject({
        ok: true,
        dispatch: { status: 'failed', dispatchId: asked.dispatchId, error: { code: 'project_required' } },
      })
      const recorded = await getDispatch(store, asked.dispatchId)
      expect(recorded).toMatchObject({ status: 'failed', error: { code: 'project_required' }, result: null })
      expect(await steps(asked.dispatchId)).toEqual([
        'requested',
        'awaiting_decision',
        'decided',
        'running',
        'finished',
      ])
      expect(await core.bus.dispatchOutcome(asked.dispatchId)).toMatchObject({ status: 'failed' })
    })
  })
}
