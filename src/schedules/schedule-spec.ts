import { Cron } from 'croner'

/** When a schedule fires: exactly one of a cron expression, an interval, or one time. */
export interface ScheduleTiming {
  cron: string | null
  every: string | null
  at: string | null
  /** An IANA time zone the cron expression is read in (default UTC). */
  timezone: string
}

const units: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }
const minEveryMs = 1000
const maxEveryMs = 366 * 86_400_000

/** `every` in milliseconds ("30s", "5m", "1h", "1d"), or undefined when it is not one. */
export function everyMs(every: string): number | undefined {
  const match = /^(\d{1,9})(s|m|h|d)$/.exec(every)
  if (!match) return undefined
  const ms = Number(match[1]) * units[match[2]!]!
  return ms >= minEveryMs && ms <= maxEveryMs ? ms : undefined
}

/** Whether `timezone` is an IANA time zone this runtime knows. */
export function isTimeZone(timezone: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: timezone })
    return true
  } catch {
    return false
  }
}

/** What is wrong with a timing, as `path: message` pairs (empty: nothing). */
export function timingErrors(timing: ScheduleTiming): Array<{ path: string; message: string }> {
  const given = [timing.cron, timing.every, timing.at].filter((value) => value !== null).length
  if (given !== 1) return [{ path: 'body', message: 'give exactly one of cron, every and at' }]
  if (!isTimeZone(timing.timezone))
    return [
      {
        path: 'body.timezone',
        message: `unknown time zone ${JSON.stringify(timing.timezone)} (an IANA name, e.g. Europe/Berlin)`,
      },
    ]
  if (timing.cron !== null) {
    const fields = timing.cron.trim().split(/\s+/).length
    if (fields !== 5 && fields !== 6)
      return [
        { path: 'body.cron', message: `a cron expression has 5 fields (or 6, seconds first); this one has ${fields}` },
      ]
    try {
      new Cron(timing.cron, { timezone: timing.timezone, paused: true })
    } catch (error) {
      return [{ path: 'body.cron', message: `not a cron expression: ${(error as Error).message}` }]
    }
  }
  if (timing.every !== null && everyMs(timing.every) === undefined)
    return [
      { path: 'body.every', message: 'an interval of 1s to 366d: a number and s, m, h or d (e.g. "30s", "5m", "1h")' },
    ]
  if (timing.at !== null && Number.isNaN(Date.parse(timing.at)))
    return [{ path: 'body.at', message: 'an ISO 8601 date-time' }]
  return []
}

/**
 * The first occurrence strictly after `after` (null: none, e.g. a one-time schedule already past).
 * An interval counts from `anchor` (when the schedule was created or its timing last changed), so its
 * occurrences do not drift with how late each firing was.
 */
export function nextOccurrence(timing: ScheduleTiming, after: Date, anchor: Date): Date | null {
  if (timing.cron !== null) return new Cron(timing.cron, { timezone: timing.timezone, paused: true }).nextRun(after)
  if (timing.every !== null) {
    const interval = everyMs(timing.every)!
    const steps = Math.max(1, Math.floor((after.getTime() - anchor.getTime()) / interval) + 1)
    return new Date(anchor.getTime() + steps * interval)
  }
  const at = new Date(timing.at!)
  return at > after ? at : null
}
