import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'
import { roundCost, type RunUsage } from './run-repository.js'

/** What a usage report groups by (`GET /api/usage?groupBy=`). */
export const usageGroupings = ['model', 'project', 'user', 'conversation', 'run', 'day', 'month'] as const
export type UsageGrouping = (typeof usageGroupings)[number]

export interface UsageFilter {
  /** Whose calls; absent: everyone's (the admin's report). */
  userId?: string
  projectId?: string
  /** Calls made at or after this time. */
  from?: Date
  /** Calls made before this time. */
  to?: Date
}

/** A run's usage fields over many calls: `cost` sums the priced ones (null when none had a price). */
export type UsageTotals = RunUsage & {
  /** Calls whose model had no price (their cost is not in `cost`). */
  unpricedCalls: number
}

export interface UsageReport {
  totals: UsageTotals
  /** One per key, in key order; absent without a grouping. */
  groups?: Array<UsageTotals & { key: string }>
  /** The last key of this page when there are more groups. */
  nextCursor?: string | null
}

const groupKeys = {
  model: sql<string>`model`,
  project: sql<string>`project_id`,
  user: sql<string>`owner_id`,
  conversation: sql<string>`conversation_id`,
  // A call outside any run (a conversation compacted on request) is under the empty key.
  run: sql<string>`coalesce(run_id, '')`,
  day: sql<string>`to_char(created_at at time zone 'UTC', 'YYYY-MM-DD')`,
  month: sql<string>`to_char(created_at at time zone 'UTC', 'YYYY-MM')`,
} satisfies Record<UsageGrouping, unknown>

const totalsColumns = sql`coalesce(sum(input_tokens), 0)::float8 as input_tokens,
  coalesce(sum(output_tokens), 0)::float8 as output_tokens,
  coalesce(sum(cached_input_tokens), 0)::float8 as cached_input_tokens,
  coalesce(sum(reasoning_tokens), 0)::float8 as reasoning_tokens,
  count(*)::float8 as model_calls,
  sum(cost)::float8 as cost,
  (count(*) - count(cost))::float8 as unpriced_calls`

interface TotalsRow {
  input_tokens: number
  output_tokens: number
  cached_input_tokens: number
  reasoning_tokens: number
  model_calls: number
  cost: number | null
  unpriced_calls: number
}

/**
 * Model usage and cost over `model_calls` (docs/guides/operating.md#usage-and-cost): the totals, and
 * with `groupBy` a page of groups in key order (`after`: the previous page's last key).
 */
export async function usageReport(
  db: Executor,
  filter: UsageFilter,
  grouping?: { by: UsageGrouping; limit: number; after?: string },
): Promise<UsageReport> {
  const where = sql.join(
    [
      sql`true`,
      ...(filter.userId !== undefined ? [sql`owner_id = ${filter.userId}`] : []),
      ...(filter.projectId !== undefined ? [sql`project_id = ${filter.projectId}`] : []),
      ...(filter.from ? [sql`created_at >= ${filter.from}`] : []),
      ...(filter.to ? [sql`created_at < ${filter.to}`] : []),
    ],
    sql` and `,
  )
  const totals = await sql<TotalsRow>`select ${totalsColumns} from model_calls where ${where}`.execute(kysely(db))
  const report: UsageReport = { totals: toTotals(totals.rows[0]) }
  if (!grouping) return report
  const key = groupKeys[grouping.by]
  const after = grouping.after !== undefined ? sql`having ${key} > ${grouping.after}` : sql``
  const rows = await sql<TotalsRow & { key: string }>`select ${key} as key, ${totalsColumns}
    from model_calls where ${where} group by 1 ${after} order by 1 limit ${grouping.limit + 1}`.execute(kysely(db))
  const groups = rows.rows.slice(0, grouping.limit).map((row) => ({ key: row.key, ...toTotals(row) }))
  report.groups = groups
  report.nextCursor = rows.rows.length > grouping.limit ? (groups.at(-1)?.key ?? null) : null
  return report
}

function toTotals(row: TotalsRow | undefined): UsageTotals {
  return {
    inputTokens: Number(row?.input_tokens ?? 0),
    outputTokens: Number(row?.output_tokens ?? 0),
    cachedInputTokens: Number(row?.cached_input_tokens ?? 0),
    reasoningTokens: Number(row?.reasoning_tokens ?? 0),
    modelCalls: Number(row?.model_calls ?? 0),
    cost: row?.cost === null || row?.cost === undefined ? null : roundCost(Number(row.cost)),
    unpricedCalls: Number(row?.unpriced_calls ?? 0),
  }
}
