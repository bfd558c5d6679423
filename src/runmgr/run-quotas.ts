import type { ProjectQuota, RunCounts } from '../store/index.js'
import { RunRequestError } from './run-errors.js'

/** The server's quotas on starting runs beyond the per-user cap (docs/guides/operating.md#run-quotas). */
export interface RunQuota {
  maxActiveRunsPerProject?: number
  runsPerMinutePerUser?: number
  runsPerMinutePerProject?: number
}

/** Which quota refused a run: a member of the 429 answer. */
export interface QuotaHit {
  scope: 'user' | 'project'
  limit: 'maxActiveRuns' | 'runsPerMinute'
  value: number
  [key: string]: number | string
}

/**
 * Counts in the database, so a quota holds across instances: runs queued or running per user and per
 * project, and runs started in the last 60 seconds. Two requests at the same instant may both pass the
 * count: the quotas are exact to within the requests in flight.
 */
export class RunQuotas {
  readonly #maxActiveRunsPerUser: number
  readonly #quota: RunQuota

  constructor(maxActiveRunsPerUser: number, quota: RunQuota = {}) {
    this.#maxActiveRunsPerUser = maxActiveRunsPerUser
    this.#quota = quota
  }

  /** On the counts (`runCountsRead`): 429 `too_many_runs` (with `quota` and `Retry-After`) when a new run would go past one. */
  refuseWhenFull(counts: RunCounts, own: ProjectQuota | null): void {
    const projectActive = own?.maxActiveRuns ?? this.#quota.maxActiveRunsPerProject
    const userPerMinute = this.#quota.runsPerMinutePerUser
    const projectPerMinute = own?.runsPerMinute ?? this.#quota.runsPerMinutePerProject
    const refuse = (quota: QuotaHit, message: string, retryAfter: number): never => {
      throw new RunRequestError('too_many_runs', message, { extensions: { quota }, retryAfter })
    }
    if (counts.userActive >= this.#maxActiveRunsPerUser)
      refuse(
        { scope: 'user', limit: 'maxActiveRuns', value: this.#maxActiveRunsPerUser },
        `you have ${this.#maxActiveRunsPerUser} runs queued or running (the most one user may have at once); wait for one to finish, or cancel one`,
        5,
      )
    if (projectActive !== undefined && counts.projectActive >= projectActive)
      refuse(
        { scope: 'project', limit: 'maxActiveRuns', value: projectActive },
        `the project has ${projectActive} runs queued or running (the most it may have at once); wait for one to finish, or cancel one`,
        5,
      )
    if (userPerMinute !== undefined && counts.userLastMinute >= userPerMinute)
      refuse(
        { scope: 'user', limit: 'runsPerMinute', value: userPerMinute },
        `you started ${userPerMinute} runs in the last minute (the most one user may start per minute)`,
        seconds(counts.userWindowFreesInMs),
      )
    if (projectPerMinute !== undefined && counts.projectLastMinute >= projectPerMinute)
      refuse(
        { scope: 'project', limit: 'runsPerMinute', value: projectPerMinute },
        `${projectPerMinute} runs started in the project in the last minute (the most it may start per minute)`,
        seconds(counts.projectWindowFreesInMs),
      )
  }
}

function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}
