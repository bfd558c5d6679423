import { terminalRunStatuses, type Executor } from '../../src/store/index.js'
import { testDb } from '../../src/store/test-access.js'

// Tests wait for the state they expect, with a generous deadline — never for a fixed duration.

export interface WaitOptions {
  /** The deadline; generous, since the machine may be busy. */
  timeoutMs?: number
  /** What is awaited, for the failure message ("run r1 to complete"); a function is asked at failure. */
  what?: string | (() => string)
  /** Pause between checks. */
  intervalMs?: number
}

/**
 * Resolves with the first truthy value of `check`, checked until the deadline; past it, fails
 * saying what was awaited (and the last value seen or error thrown).
 */
export async function waitFor<T>(check: () => T | Promise<T>, options: WaitOptions = {}): Promise<NonNullable<T>> {
  const { timeoutMs = 15_000, what = 'the condition', intervalMs = 20 } = options
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const value = await check()
      if (value) return value as NonNullable<T>
      last = value
    } catch (error) {
      last = error
    }
    if (Date.now() >= deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what} (last: ${describe(last)})`,
      )
    await pause(Math.min(intervalMs, Math.max(0, deadline - Date.now())))
  }
}

/** Where runs are read: a test server (its url) or a base URL. */
export type RunSource = { url: string } | string

type RunJson = Record<string, unknown> & { status?: string }

/** A run's statuses the server's long poll answers at: ended or waiting for action. */
export const settledRunStatuses: readonly string[] = [...terminalRunStatuses, 'requires_action']

/**
 * Waits until run `runId` is in one of `until` (or satisfies it) and returns the run as JSON.
 * For settled statuses it uses the server's long poll (GET /api/runs/:id with Prefer: wait=N),
 * which answers the moment the run ends or needs action; for mid-run states it reads the run
 * until it matches.
 */
export async function waitForRun(
  source: RunSource,
  token: string,
  runId: string,
  until: readonly string[] | ((run: RunJson) => boolean),
  timeoutMs = 15_000,
): Promise<RunJson> {
  const baseUrl = typeof source === 'string' ? source : source.url
  const matches = typeof until === 'function' ? until : (run: RunJson) => until.includes(run.status ?? '')
  const longPoll = typeof until !== 'function' && until.every((status) => settledRunStatuses.includes(status))
  const deadline = Date.now() + timeoutMs
  let last: RunJson | undefined
  let slotsFull = false
  for (;;) {
    const remaining = deadline - Date.now()
    const waitSeconds = Math.min(120, Math.floor(remaining / 1000))
    const headers: Record<string, string> = { authorization: `Bearer ${token}` }
    const settledBefore = last !== undefined && settledRunStatuses.includes(last.status ?? '')
    if (longPoll && !slotsFull && waitSeconds >= 1 && !settledBefore) headers.prefer = `wait=${waitSeconds}`
    const response = await fetch(`${baseUrl}/api/runs/${runId}`, { headers })
    const body = (await response.json()) as RunJson
    // A waiting request takes a stream slot; a test at its stream cap gets 429 — read plainly then.
    if (response.status === 429 && headers.prefer) {
      slotsFull = true
      continue
    }
    if (response.status !== 200)
      throw new Error(`GET /api/runs/${runId} answered ${response.status}: ${JSON.stringify(body)}`)
    last = body
    if (matches(body)) return body
    if (Date.now() >= deadline) {
      const expected = typeof until === 'function' ? 'the expected state' : until.join('|')
      throw new Error(`run ${runId} did not reach ${expected} within ${timeoutMs} ms: ${JSON.stringify(body)}`)
    }
    // Unsettled after a long poll means the wait ran out; otherwise read again shortly.
    if (!headers.prefer || settledRunStatuses.includes(body.status ?? '')) await pause(20)
  }
}

/** `promise`, or a failure naming `what` if it has not settled within `timeoutMs` (when the bound is itself asserted). */
export async function within<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${timeoutMs} ms`)), timeoutMs)
  })
  try {
    return await Promise.race([promise, late])
  } finally {
    clearTimeout(timer)
  }
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

function describe(value: unknown): string {
  if (value instanceof Error) return value.message
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** Waits until run `runId` streams its round `iteration` (a few text deltas of it stored). */
export async function waitForRoundStreaming(
  store: Executor,
  runId: string,
  iteration: number,
  timeoutMs = 20_000,
): Promise<void> {
  await waitFor(
    async () => {
      const deltas = await testDb(store)
        .selectFrom('events')
        .select('id')
        .where('run_id', '=', runId)
        .where('type', '=', 'message.delta')
        .execute()
      const run = await testDb(store)
        .selectFrom('runs')
        .select('iteration')
        .where('id', '=', runId)
        .executeTakeFirstOrThrow()
      return run.iteration === iteration && deltas.length > 3
    },
    { timeoutMs, what: `run ${runId} to stream round ${iteration}` },
  )
}
