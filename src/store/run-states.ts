import type { RunStatus } from './database.js'

/**
 * The run state machine in one place: every change of `runs.status` the code makes, who makes it and
 * when. docs/architecture.md#run-states shows this table (run-states.test.ts checks they agree), and
 * every write that sets a status declares its move against it (`RunMove`, `RunPatch.move`).
 */

/** Every run status, in the order of the check constraint (migrations/0003_runs.sql). */
export const runStatuses = [
  'queued',
  'running',
  'requires_action',
  'completed',
  'failed',
  'cancelled',
  'expired',
] as const satisfies readonly RunStatus[]

/** Who makes a transition. */
export type RunActor =
  /** A request creating a run (`RunManager.createRun`). */
  | 'create'
  /** The conversation's queue moving on: the driver that ended the active run, or the sweeper. */
  | 'queue'
  /** The run loop driving the run (the lease holder). */
  | 'loop'
  /** A person's answer: a decision, tool outputs, or an orphaned dispatch ended. */
  | 'answer'
  /** A cancel or a supersede. */
  | 'cancel'
  /** The sweeper taking over a run whose lease passed. */
  | 'takeover'
  /** `POST /api/runs/:id/resume`. */
  | 'resume'
  /** A pending decision or the wait itself running out of time. */
  | 'expiry'

export interface RunTransitionRule {
  /** Null: the run is created in `to`. */
  readonly from: RunStatus | null
  readonly to: RunStatus
  readonly by: RunActor
  /** The docs' "When" column. */
  readonly when: string
  /** The docs' "Made by" column: the code that writes it. */
  readonly madeBy: string
}

export const runTransitions = [
  {
    from: null,
    to: 'running',
    by: 'create',
    when: 'A new run in an idle conversation',
    madeBy: '`RunManager.createRun` → `createRun` (`transitions/create-run.ts`)',
  },
  {
    from: null,
    to: 'queued',
    by: 'create',
    when: 'Another run is active and `ifActive: "enqueue"`, or a run quota is full in queue mode',
    madeBy: '`createRun` (`transitions/create-run.ts`, `allowQueue`; `queueForQuota`)',
  },
  {
    from: 'queued',
    to: 'running',
    by: 'queue',
    when: "The conversation's active run ended (or the sweeper finds the queue idle); for a run waiting for a quota, room freed",
    madeBy:
      '`startQueuedRun` (`transitions/start-queued.ts`), by `DriverPool.startQueued`: when a driver stops (`nextQueuedRunAfterEnd`), `startNext`, the sweeper; `startQuotaQueuedRun` (`transitions/promote-quota-queued.ts`), by `QuotaPromoter`',
  },
  {
    from: 'queued',
    to: 'cancelled',
    by: 'cancel',
    when: '`POST /api/runs/:id/cancel`, or superseded by `ifActive: "interrupt"`',
    madeBy: '`RunManager.cancel` → `RunWriter.end` under the row lock',
  },
  {
    from: 'running',
    to: 'running',
    by: 'takeover',
    when: 'Lease passed or released: another driver takes over (`resumes + 1` when it passed)',
    madeBy: '`takeOver` (`transitions/take-over.ts`), by `RunSweeper.#takeOver`',
  },
  {
    from: 'running',
    to: 'requires_action',
    by: 'loop',
    when: 'A call of the round awaits a decision or a client tool output; the lease is released',
    madeBy: '`waitForPerson` (`transitions/wait-for-person.ts`), by `driveRun` (fenced)',
  },
  {
    from: 'running',
    to: 'completed',
    by: 'loop',
    when: 'The model answered without tool calls',
    madeBy: "`modelTurn` (`model-turn.ts`): `endPatch` in the turn's `runTransition`",
  },
  {
    from: 'running',
    to: 'failed',
    by: 'loop',
    when: 'Model error after retries (`upstream_error`, `timeout`, `tools_unsupported`, …); an answer past its limits (`output_too_large`)',
    madeBy: '`modelTurn` → `CallLedger.end` → `endRun` (`transitions/end-run.ts`, fenced)',
  },
  {
    from: 'running',
    to: 'failed',
    by: 'loop',
    when: 'Tool calls at the `maxIterations` cap (`iteration_cap`); model removed from config (`unknown_model`)',
    madeBy: '`driveRun` → `RunWriter.end` (fenced)',
  },
  {
    from: 'running',
    to: 'failed',
    by: 'loop',
    when: 'An unexpected error in the loop (`internal`)',
    madeBy: '`DriverPool` (the loop threw) → `RunWriter.end` (fenced)',
  },
  {
    from: 'running',
    to: 'failed',
    by: 'takeover',
    when: 'Taken over after its lease passed more than `maxResumes` times (`interrupted`)',
    madeBy: '`RunSweeper.#takeOver` → `RunWriter.end` (fenced by the new lease)',
  },
  {
    from: 'running',
    to: 'cancelled',
    by: 'cancel',
    when: 'Cancel, supersede, or the owner lost access (`access_revoked`) while driven here',
    madeBy: 'driver aborted → `RunWriter.endAborted` (fenced)',
  },
  {
    from: 'running',
    to: 'cancelled',
    by: 'cancel',
    when: 'Cancel while driven by another instance',
    madeBy:
      "`RunManager.cancel` → `RunWriter.end` under the row lock + `plinth_runs` NOTIFY; the driver's next write fails its fence",
  },
  {
    from: 'requires_action',
    to: 'running',
    by: 'answer',
    when: 'Every awaited call answered (decision, tool outputs, orphaned dispatch ended)',
    madeBy:
      '`continueAnsweredRun` (`transitions/continue-answered.ts`), by `DriverPool.resumeIfAnswered` (after a decision, `submitToolOutputs`, the sweeper)',
  },
  {
    from: 'requires_action',
    to: 'expired',
    by: 'expiry',
    when: 'One of its pending decisions expired',
    madeBy: "`RunSettlement.settle` (cmdbus) → `CallLedger.end`, in the bus's transaction",
  },
  {
    from: 'requires_action',
    to: 'expired',
    by: 'expiry',
    when: 'Waiting longer than `PLINTH_ACTION_TTL`',
    madeBy: '`RunSweeper.sweep` → `RunWriter.end`',
  },
  {
    from: 'requires_action',
    to: 'cancelled',
    by: 'cancel',
    when: 'Cancel or supersede',
    madeBy: '`RunManager.cancel` → `RunWriter.end` under the row lock',
  },
  {
    from: 'failed',
    to: 'running',
    by: 'resume',
    when: '`POST /api/runs/:id/resume`, when `error.code` is `upstream_error`, `upstream_auth_missing`, `timeout`, `interrupted`, `tools_unsupported` or `unknown_model`',
    madeBy: '`resumeFailedRun` (`transitions/resume-failed.ts`), by `RunManager.resume`',
  },
] as const satisfies readonly RunTransitionRule[]

type Rule = (typeof runTransitions)[number]

/** The states the table lets a run move into `to` from (null: created in it). */
export type RunFrom<To extends RunStatus> = Extract<Rule, { to: To }>['from']

/** The statuses a run may be created in. */
export type RunCreatedStatus = Extract<Rule, { from: null }>['to']

/**
 * A status change as a write declares it: the status it sets, and the states it may find the run in.
 * The type admits only moves the table lists, so an unlisted one does not compile.
 */
export type RunMove = {
  [To in RunStatus]: { readonly from: ReadonlyArray<Exclude<RunFrom<To>, null>>; readonly to: To }
}[RunStatus]

/**
 * A move into `to` from every state the table lets a run reach it from — for a write that ends a run
 * in whatever state it finds it (`endRun`, after `CallLedger.end` answers its open calls). Computed from the table, so listed by construction.
 */
export function moveInto<To extends RunStatus>(to: To): Extract<RunMove, { to: To }> {
  const from = [
    ...new Set(
      runTransitions
        .filter((rule) => rule.to === to && rule.from !== null)
        .map((rule) => rule.from as Exclude<RunFrom<To>, null>),
    ),
  ]
  if (from.length === 0) throw new Error(`no run transition into ${to} is listed in run-states.ts`)
  return { from, to } as unknown as Extract<RunMove, { to: To }>
}

/** Whether the table lists `from` → `to`. */
export function isRunTransition(from: RunStatus | null, to: RunStatus): boolean {
  return runTransitions.some((rule) => rule.from === from && rule.to === to)
}

/** A status write that found the run in a state its move does not list (it moved on since it was read). */
export class RunMoveRefused extends Error {
  constructor(
    readonly runId: string,
    readonly move: RunMove,
  ) {
    super(`run ${runId} is not in ${move.from.join(' or ')}: it cannot move to ${move.to}`)
    this.name = 'RunMoveRefused'
  }
}
