/**
 * The delay before attempt `attempt + 1` after attempt `attempt` failed: `base · 2^(attempt−1)`, ±20 %
 * jitter (so receivers coming back are not hit by every sender at once). With the 5 s default: about
 * 5 s, 10 s, 20 s, … 5.7 h.
 */
export function retryDelay(attempt: number, baseMs: number, random: () => number = Math.random): number {
  return baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 30) * (0.8 + 0.4 * random())
}

/** When to try again after a failed attempt, or null when that would fall past the retry window. */
export function nextAttempt(
  attempt: number,
  now: number,
  windowStart: number,
  settings: { retryBaseMs: number; retryWindowMs: number },
): Date | null {
  const at = now + retryDelay(attempt, settings.retryBaseMs)
  return at <= windowStart + settings.retryWindowMs ? new Date(at) : null
}
