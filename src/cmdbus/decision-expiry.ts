import { getDispatch, lastAuditEnvelope, resolveDecision, type DecisionRecord, type Executor } from '../store/index.js'
import { initialEnvelope, recordStep } from './audit-envelope.js'
import { appendDecisionEvent } from './outcomes.js'

/**
 * Expires a pending decision inside the caller's transaction, which holds its run's row lock and may
 * append to the audit chain: the decision's row, its dispatch's `finished` step and `decision.resolved`.
 * Undefined when it was no longer pending. The run's call is the caller's to answer.
 */
export async function expirePendingDecision(
  tx: Executor,
  decisionId: string,
  /** Why: its run was cancelled (the dispatch ends `cancelled`), or ended otherwise; by default its deadline passed. */
  ended?: { cancelled: boolean; message: string },
): Promise<DecisionRecord | undefined> {
  const decision = await resolveDecision(tx, decisionId, { status: 'expired' })
  if (!decision) return undefined
  const dispatch = await getDispatch(tx, decision.dispatchId)
  if (dispatch) {
    const envelope = (await lastAuditEnvelope(tx, dispatch.id)) ?? initialEnvelope(dispatch, undefined)
    await recordStep(tx, 'finished', envelope, dispatch, {
      status: ended?.cancelled ? 'cancelled' : 'expired',
      decision: { id: decision.id, outcome: 'expired', by: null, scope: null, via: null },
      error: {
        code: ended?.cancelled ? 'cancelled' : 'expired',
        message: ended?.message ?? 'the decision expired before anyone answered',
      },
      finishedAt: new Date().toISOString(),
    })
  }
  await appendDecisionEvent(tx, 'decision.resolved', decision, {
    decisionId: decision.id,
    outcome: 'expired',
    by: null,
    scope: 'once',
  })
  return decision
}
