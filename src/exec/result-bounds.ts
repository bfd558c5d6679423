import type { ExecResult } from './types.js'

/*
 * An execution's own bounds (its timeout, its captured output) must always end in the documented
 * result, never in the bus's `timeout` or `result_too_large` with the output lost: the bus's bounds
 * for an exec command are derived from the execution's (docs/exec.md, "Bounds").
 */

/** Ending an execution after its timeout: cgroup kill (≤ 0.5 s), SIGTERM grace, SIGKILL, cleanup (≤ 1 s), pipes. */
export const execKillGraceMs = 3_000

/** Preparing and accounting an execution (sandbox setup, measuring the work directory) on a loaded machine. */
const execOverheadMs = 10_000

/** The bus's timeout for a command that runs one execution with `timeoutMs`: always above it plus the kill grace. */
export function execCommandTimeoutMs(timeoutMs: number): number {
  return timeoutMs + execKillGraceMs + execOverheadMs
}

/** Room a result needs besides its two streams' text: field names, numbers, and slack for escaping. */
export const resultEnvelopeBytes = 16 * 1024

/** The captured output per stream that fits a result of `resultMaxBytes` (both streams plus the envelope). */
export function outputBytesFor(resultMaxBytes: number): number {
  return Math.max(1024, Math.floor((resultMaxBytes - resultEnvelopeBytes) / 2))
}

/**
 * The output cap per stream to use: the configured one when it fits a result, else a reason naming
 * both settings (a start-up error); derived from `resultMaxBytes` when none is configured.
 */
export function resolveOutputBytes(
  configured: number | undefined,
  resultMaxBytes: number,
): { outputBytes: number } | { problem: string } {
  const fits = outputBytesFor(resultMaxBytes)
  if (configured === undefined) return { outputBytes: fits }
  if (2 * configured + resultEnvelopeBytes <= resultMaxBytes) return { outputBytes: configured }
  return {
    problem:
      `exec.limits.outputBytes (PLINTH_EXEC_OUTPUT_BYTES, ${configured}) cannot fit a command result: two streams of it plus ${resultEnvelopeBytes} bytes ` +
      `must fit resultMaxBytes (PLINTH_RESULT_MAX_BYTES, ${resultMaxBytes}); set it to at most ${fits} (or leave it unset to derive it), or raise resultMaxBytes`,
  }
}

/** Cuts a string to `length` UTF-16 units without splitting a surrogate pair. */
function head(text: string, length: number): string {
  if (length >= text.length) return text
  const cut = text.slice(0, Math.max(0, length))
  const last = cut.charCodeAt(cut.length - 1)
  return last >= 0xd800 && last <= 0xdbff ? cut.slice(0, -1) : cut
}

/**
 * The result cut to at most `maxBytes` of JSON, keeping the head of each stream (`truncated: true`):
 * JSON escaping can make captured bytes several times larger (a control character is six).
 */
export function fitExecResult(result: ExecResult, maxBytes: number): ExecResult {
  let fitted = result
  for (let attempt = 0; attempt < 12; attempt++) {
    const bytes = Buffer.byteLength(JSON.stringify(fitted))
    if (bytes <= maxBytes) return fitted
    const ratio = Math.max(0, (maxBytes - 1024) / bytes)
    fitted = {
      ...fitted,
      stdout: head(fitted.stdout, Math.floor(fitted.stdout.length * ratio)),
      stderr: head(fitted.stderr, Math.floor(fitted.stderr.length * ratio)),
      truncated: true,
    }
  }
  return { ...fitted, stdout: '', stderr: '', truncated: true }
}
