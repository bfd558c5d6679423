import { performance } from 'node:perf_hooks'
import type { TransitionRead } from '../store/index.js'
import type { PeriodCheck } from './period-budgets.js'

/**
 * What decides whether a new run may start (its quotas' counts and the period budgets), read ahead in
 * the statement that reads its conversation for the request (docs/guides/operating.md#run-quotas):
 * one statement fewer per run. `RunManager.standingReads` makes one; `createRun` takes it back with
 * what was read.
 */
export interface StandingReads {
  userId: string
  /** The subqueries, by name, for the conversation's statement to carry. */
  reads: { counts: TransitionRead; periods: TransitionRead }
  periods: PeriodCheck
  /** When the reads were prepared (performance.now()). */
  preparedAt: number
}

/** A `StandingReads` with what its statement read. */
export interface ReadStanding {
  check: StandingReads
  values: { [name: string]: unknown }
}

/**
 * How old read-ahead counts may be when the run is created: what the request did in between (an
 * attachment's extraction can take seconds) would widen the window in which concurrent requests all
 * pass a quota. Older ones are read again.
 */
export const standingFreshMs = 250

/** The values of `standing` when they were read for this user within `standingFreshMs`. */
export function freshStanding(
  standing: ReadStanding | undefined,
  userId: string,
): { counts: unknown; periods: unknown; check: PeriodCheck } | undefined {
  if (!standing || standing.check.userId !== userId) return undefined
  if (performance.now() - standing.check.preparedAt > standingFreshMs) return undefined
  if (!('counts' in standing.values) || !('periods' in standing.values)) return undefined
  return { counts: standing.values.counts, periods: standing.values.periods, check: standing.check.periods }
}
