import { sql } from 'kysely'
import { auditAppendWrittenCtes, type AuditEntryInput } from './audit-repository.js'
import type { JsonValue } from './database.js'
import { startingDispatchColumns, startingDispatchRow, type StartingDispatch } from './dispatch-start.js'
import type { DispatchStatus } from './dispatch-repository.js'
import { storableJson } from './storable.js'
import { kysely, type Executor } from './executor.js'

/**
 * A dispatch step that changes nothing but the dispatch and the audit log (no run's lease to check, no
 * events), so that the steps of concurrent dispatches can share one statement (`writeDispatchSteps`).
 */
export type DispatchStep =
  /** A dispatch that runs at once: its row, already `running`, with its `requested` and `running` entries. */
  | { kind: 'start'; dispatch: StartingDispatch; audits: AuditEntryInput[] }
  /** How a running dispatch ended, with its `finished` entry. */
  | {
      kind: 'finish'
      id: string
      status: DispatchStatus
      result?: JsonValue
      error?: { [key: string]: JsonValue }
      audit: AuditEntryInput
    }

/**
 * Writes several dispatches' steps in ONE statement (its own transaction): one append to the audit
 * chain, one commit and one flush for all of them (docs/architecture.md#the-command-bus). Each
 * answer says whether its step was written: a start whose idempotency key is taken, or a finish whose
 * dispatch is gone, writes nothing and gets no entries. Rows are written before the chain is locked.
 */
export async function writeDispatchSteps(db: Executor, steps: DispatchStep[]): Promise<boolean[]> {
  const starts = steps.flatMap((step) => (step.kind === 'start' ? [step] : []))
  const finishes = steps.flatMap((step) => (step.kind === 'finish' ? [step] : []))
  const at = new Date()
  const inserted =
    starts.length === 0
      ? sql`select null::text as id where false`
      : sql`insert into dispatches ${startingDispatchColumns}
        values ${sql.join(starts.map((step) => sql`(${startingDispatchRow(step.dispatch)})`))}
        on conflict (owner_id, idempotency_key) where idempotency_key is not null do nothing
        returning id`
  const json = (value: JsonValue | undefined) => (value === undefined ? null : storableJson(value))
  // The finished rows are locked in id order before any is changed, as the lease renewal locks them
  // (`renewDispatchExecutor`): two statements that each change several never wait for each other in a circle.
  const locked =
    finishes.length === 0
      ? sql`select null::text as id where false`
      : sql`select id from dispatches where id in (${sql.join(finishes.map((step) => sql`${step.id}::text`))})
        order by id for no key update`
  const updated =
    finishes.length === 0
      ? sql`select null::text as id where false`
      : sql`update dispatches set status = v.status, result = v.result, error = v.error, updated_at = ${at}::timestamptz
        from (values ${sql.join(
          finishes.map(
            (step) =>
              sql`(${step.id}::text, ${step.status}::text, ${json(step.result)}::jsonb, ${json(step.error)}::jsonb)`,
          ),
        )}) v (id, status, result, error)
        where dispatches.id = v.id and (select count(*) from l) >= 0
        returning dispatches.id`
  const entries = steps.flatMap((step) => (step.kind === 'start' ? step.audits : [step.audit]))
  const append = auditAppendWrittenCtes(entries, sql`select id from d union all select id from u`)
  const { rows } = await sql<{ inserted: string[] | null; updated: string[] | null }>`
    with recursive d as (${inserted}), l as (${locked}), u as (${updated}), ${append.sql}
    select (select array_agg(id) from d) as inserted, (select array_agg(id) from u) as updated,
           (select count(*) from audit_entry) as audited`.execute(kysely(db))
  const written = new Set([...(rows[0]?.inserted ?? []), ...(rows[0]?.updated ?? [])])
  return steps.map((step) => written.has(step.kind === 'start' ? step.dispatch.id : step.id))
}
