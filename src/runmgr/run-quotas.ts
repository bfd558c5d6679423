import type { ProjectQuota, RunCounts, RunQuotaLimits } from '../store/index.js'
import { RunRequestError } from './run-errors.js'

/** The server's quotas on starting runs beyond the per-user cap (docs/guides/operating.md#run-quotas). */
export interface RunQuota {
  maxActiveRunsPerProject?: number
  runsPerMinutePerUser?: number
  runsPerMinutePerProject?: number
  /** Over a quota, a new run is refused (429, the default) or queued until there is room. */
  overLimit?: 'refuse' | 'queue'
  /** Queue mode: runs one user may have waiting for a quota (default 100); past it, 429. */
  maxQueuedRunsPerUser?: number
}

/** Which quota refused a run: a member of the 429 answer. */
export interface QuotaHit {
  scope: 'user' | 'project'
  limit: 'maxActiveRuns' | 'runsPerMinute' | 'maxQueuedRuns'
  value: number
  [key: string]: number | string
}

interface Full {
  quota: QuotaHit
  message: string
  retryAfter: number
}

/**
 * Counts in the database, so a quota holds across instances: runs queued or running per user and per
 * project, and runs started in the last 60 seconds. The request's counts answer most refusals at once;
 * the run's own statement counts again (`limits`), so requests at the same instant pass no further.
 */
export class RunQuotas {
  readonly #maxActiveRunsPerUser: number
  readonly #quota: RunQuota

  constructor(maxActiveRunsPerUser: number, quota: RunQuota = {}) {
    this.#maxActiveRunsPerUser = maxActiveRunsPerUser
    this.#quota = quota
  }

  get #maxQueued(): number {
    return this.#quota.maxQueuedRunsPerUser ?? 100
  }

  /** The server's per-minute limits, for the counts' read to time a retry by (`runCountsRead`). */
  get perMinute(): { user?: number; project?: number } {
    return { user: this.#quota.runsPerMinutePerUser, project: this.#quota.runsPerMinutePerProject }
  }

  /** `queue`: a run over a quota waits for room instead of being refused. */
  get mode(): 'refuse' | 'queue' {
    return this.#quota.overLimit ?? 'refuse'
  }

  /** On the counts (`runCountsRead`): 429 `too_many_runs` (with `quota` and `Retry-After`) when a new run would go past one. */
  refuseWhenFull(counts: RunCounts, own: ProjectQuota | null): void {
    const full = this.full(counts, own)
    if (full) throw this.#refusal(full)
  }

  /**
   * A new run: `start` when there is room; over a quota, `queue` in queue mode (429 past the user's
   * queue) or 429 `too_many_runs`.
   */
  admit(counts: RunCounts, own: ProjectQuota | null): 'start' | 'queue' {
    const full = this.full(counts, own)
    if (!full) return 'start'
    if (this.mode === 'refuse') throw this.#refusal(full)
    const maxQueued = this.#maxQueued
    if (counts.userQueued >= maxQueued)
      throw this.#refusal({
        quota: { scope: 'user', limit: 'maxQueuedRuns', value: maxQueued },
        message: `you have ${maxQueued} runs waiting for a quota (the most one user may have waiting); wait for them to start, or cancel one`,
        retryAfter: full.retryAfter,
      })
    return 'queue'
  }

  /**
   * A resumed run: 429 `too_many_runs` when the user or the project already has as many runs queued or
   * running as it may (the per-minute limits count new runs, not resumed ones; no queueing).
   */
  refuseResumeWhenFull(counts: RunCounts, own: ProjectQuota | null): void {
    const full = this.full(counts, own, { activeOnly: true })
    if (full) throw this.#refusal(full)
  }

  /**
   * The limits on a new run, for its statement to count again: the server's, with the project's own
   * (`own`) before them; for a run queued for a quota (`admission`), the user's queue's.
   */
  limits(own: ProjectQuota | null, admission: 'start' | 'queue' = 'start'): RunQuotaLimits {
    if (admission === 'queue') return { queueMode: true, userQueued: this.#maxQueued }
    return {
      queueMode: this.mode === 'queue',
      userActive: this.#maxActiveRunsPerUser,
      projectActive: own?.maxActiveRuns ?? this.#quota.maxActiveRunsPerProject,
      userPerMinute: this.#quota.runsPerMinutePerUser,
      projectPerMinute: own?.runsPerMinute ?? this.#quota.runsPerMinutePerProject,
    }
  }

  /** The limits on a resumed run (`limits`): runs queued or running only, as `refuseResumeWhenFull`. */
  resumeLimits(own: ProjectQuota | null): RunQuotaLimits {
    const { queueMode, userActive, projectActive } = this.limits(own)
    return { queueMode, userActive, projectActive }
  }

  /** The first quota a new run would go past, or null when there is room. */
  full(counts: RunCounts, own: ProjectQuota | null, options: { activeOnly?: boolean } = {}): Full | null {
    const { projectActive, userPerMinute, projectPerMinute } = this.limits(own)
    if (counts.userActive >= this.#maxActiveRunsPerUser)
      return {
        quota: { scope: 'user', limit: 'maxActiveRuns', value: this.#maxActiveRunsPerUser },
        message: `you have ${this.#maxActiveRunsPerUser} runs queued or running (the most one user may have at once); wait for one to finish, or cancel one`,
        retryAfter: 5,
      }
    if (projectActive !== undefined && counts.projectActive >= projectActive)
      return {
        quota: { scope: 'project', limit: 'maxActiveRuns', value: projectActive },
        message: `the project has ${projectActive} runs queued or running (the most it may have at once); wait for one to finish, or cancel one`,
        retryAfter: 5,
      }
    if (options.activeOnly) return null
    if (userPerMinute !== undefined && counts.userLastMinute >= userPerMinute)
      return {
        quota: { scope: 'user', limit: 'runsPerMinute', value: userPerMinute },
        message: `you started ${userPerMinute} runs in the last minute (the most one user may start per minute)`,
        retryAfter: seconds(counts.userWindowFreesInMs),
      }
    if (projectPerMinute !== undefined && counts.projectLastMinute >= projectPerMinute)
      return {
        quota: { scope: 'project', limit: 'runsPerMinute', value: projectPerMinute },
        message: `${projectPerMinute} runs started in the project in the last minute (the most it may start per minute)`,
        retryAfter: seconds(counts.projectWindowFreesInMs),
      }
    return null
  }

  #refusal(full: Full): RunRequestError {
    return new RunRequestError('too_many_runs', full.message, {
      extensions: { quota: full.quota },
      retryAfter: full.retryAfter,
    })
  }
}

function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}
