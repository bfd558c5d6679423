import type { CommandContext, JsonValue } from '../extension/index.js'
import { finishDispatch, storableJsonText, storableText, type DispatchRecord, type Store } from '../store/index.js'
import { recordStep, stepParts, type AuditEnvelope, type EnvelopeChange } from './audit-envelope.js'
import type { BusError, DispatchHooks, DispatchOutcome } from './bus-types.js'
import type { RegisteredCommand } from './command-catalog.js'
import { isCommandError, toJsonError } from './outcomes.js'

export const defaultTimeoutMs = 30_000

/** Largest result a handler may return, as JSON bytes (PLINTH_RESULT_MAX_BYTES). */
export const defaultResultMaxBytes = 1024 * 1024

/** Runs an authorized command's handler with its timeout and result limit, then records how it ended (with `hooks`, in the caller's fenced transaction). */
export async function runHandler(
  deps: { store: Store; maxResultBytes: number | undefined },
  command: RegisteredCommand,
  dispatch: DispatchRecord,
  current: AuditEnvelope,
  context: CommandContext & { abort: AbortController },
  hooks?: DispatchHooks,
): Promise<DispatchOutcome> {
  const { store } = deps
  const timeoutMs = command.spec.timeoutMs ?? defaultTimeoutMs
  let timer: NodeJS.Timeout | undefined
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => {
      context.abort.abort(new Error('timeout'))
      resolve('timeout')
    }, timeoutMs)
  })
  let outcome: DispatchOutcome
  try {
    const result = await Promise.race([
      Promise.resolve().then(() => command.handler(dispatch.params, context)),
      timedOut,
    ])
    // Past its deadline: what it returned once its time was up is not taken.
    if (result === 'timeout' || (context.abort.signal.reason as Error | undefined)?.message === 'timeout') {
      outcome = {
        status: 'failed',
        dispatchId: dispatch.id,
        error: { code: 'command_timeout', message: `${command.spec.id} did not finish within ${timeoutMs} ms` },
      }
    } else {
      // A handler that returned finished its work, even when a cancel came meanwhile (a handler that
      // takes no signal, or finished first): its effects happened, so the record says so. One that stops
      // for its signal throws, and is recorded below as cancelled (docs/guides/writing-a-plugin.md).
      // What is returned is what is stored: NUL and lone surrogates become U+FFFD (docs/security.md).
      const json = storableJsonText(JSON.stringify(result ?? null) ?? 'null')
      const bytes = Buffer.byteLength(json)
      const limit = deps.maxResultBytes ?? defaultResultMaxBytes
      outcome =
        bytes > limit
          ? {
              status: 'failed',
              dispatchId: dispatch.id,
              error: {
                code: 'result_too_large',
                message: `${command.spec.id} returned ${bytes} bytes; results are limited to ${limit} (PLINTH_RESULT_MAX_BYTES)`,
              },
            }
          : { status: 'succeeded', dispatchId: dispatch.id, result: JSON.parse(json) as JsonValue }
    }
  } catch (error) {
    if (context.signal.aborted && !isCommandError(error)) {
      const reason = context.abort.signal.reason as Error | undefined
      outcome =
        reason?.message === 'timeout'
          ? {
              status: 'failed',
              dispatchId: dispatch.id,
              error: { code: 'command_timeout', message: `${command.spec.id} did not finish within ${timeoutMs} ms` },
            }
          : { status: 'cancelled', dispatchId: dispatch.id, error: { code: 'cancelled', message: 'cancelled' } }
    } else if (isCommandError(error)) {
      outcome = {
        status: 'failed',
        dispatchId: dispatch.id,
        error: {
          code: error.code,
          message: storableText(error.message),
          ...(command.plugin === 'core' && { core: true }),
        },
      }
    } else {
      context.log.error('command handler threw', { commandId: command.spec.id, dispatchId: dispatch.id, err: error })
      outcome = {
        status: 'failed',
        dispatchId: dispatch.id,
        error: { code: 'command_failed', message: `${command.spec.id} failed` },
      }
    }
  } finally {
    clearTimeout(timer)
  }
  try {
    return await recordOutcome(store, outcome, current, dispatch, hooks)
  } catch (error) {
    // The outcome could not be stored: the dispatch ends `failed` with the reason now, not `running`
    // until a restart calls it interrupted. If even that cannot be written, the caller sees the error.
    context.log.error('a dispatch outcome could not be stored', {
      commandId: command.spec.id,
      dispatchId: dispatch.id,
      err: error,
    })
    const failed: DispatchOutcome = {
      status: 'failed',
      dispatchId: dispatch.id,
      error: {
        core: true,
        code: 'result_not_stored',
        message: `the result could not be stored: ${storableText((error as Error)?.message ?? String(error)).slice(0, 300)}`,
      },
    }
    return recordOutcome(store, failed, current, dispatch, hooks)
  }
}

/** Records how a dispatch ended: its last audit step, with whatever the caller changes alongside. */
async function recordOutcome(
  store: Store,
  outcome: DispatchOutcome,
  current: AuditEnvelope,
  dispatch: DispatchRecord,
  hooks: DispatchHooks | undefined,
): Promise<DispatchOutcome> {
  const change: EnvelopeChange =
    outcome.status === 'succeeded'
      ? { status: 'succeeded', result: outcome.result, finishedAt: new Date().toISOString() }
      : {
          status: outcome.status as 'failed',
          error: toJsonError((outcome as { error: BusError }).error),
          finishedAt: new Date().toISOString(),
        }
  if (!hooks?.settled || hooks.finishTogether) {
    // The dispatch's last step, with a driver's call's answer (fenced by its lease): one statement.
    const together = hooks?.finishTogether?.(outcome)
    const parts = stepParts(store, 'finished', current, dispatch, change)
    if (!together) {
      // Nothing of a run goes with it: it shares a statement with the steps of concurrent dispatches.
      const { status, result, error } = parts.change
      await store.dispatchStep({
        kind: 'finish',
        id: dispatch.id,
        status,
        ...(result !== undefined && { result }),
        ...(error && { error }),
        audit: parts.entry,
      })
      return outcome
    }
    together.written(
      await store.statement((db, tag, deferFlush) =>
        finishDispatch(db, parts.query(), parts.entry, together, tag, deferFlush),
      ),
    )
    return outcome
  }
  // A decided call's outcome: the run's row lock, the last step and the run's ledger in one transaction.
  await store.transaction(async (tx) => {
    await hooks.lock?.(tx)
    await recordStep(tx, 'finished', current, dispatch, change)
    await hooks.settled?.(tx, outcome)
  })
  return outcome
}
