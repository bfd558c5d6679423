import type { CommandBus } from '../cmdbus/index.js'
import type { JsonValue, PluginLogger } from '../extension/index.js'
import type { ConversationService, ProjectService, RunManager } from '../runmgr/index.js'
import {
  Accounts,
  appendAuditEntry,
  getSchedule,
  lockDueSchedules,
  lockStalePendingFirings,
  markFiringDispatched,
  markFiringFailed,
  markFiringStarted,
  recordOccurrence,
  RequestError,
  setFiringConversation,
  stopSchedule,
  type Conversation,
  type Project,
  type Schedule,
  type ScheduleCommandTarget,
  type ScheduleFiring,
  type ScheduleRunTarget,
  type Executor,
  type Store,
  type User,
} from '../store/index.js'
import { everyMs, nextOccurrence } from './schedule-spec.js'

export interface ScheduleFirerOptions {
  store: Store
  bus: CommandBus
  runs: RunManager
  projects: ProjectService
  conversations: ConversationService
  log: PluginLogger
  /** How often due schedules are looked for (default 1 s: the lateness of an on-time firing). */
  tickMs?: number
  /** An occurrence later than this is missed (its schedule's `missed` policy applies; default 60 s). */
  graceMs?: number
  /** A firing still pending this long after its claim (its instance died) is fired by another (default 30 s). */
  pendingLeaseMs?: number
  /** Firings whose runs are started at once (default 8): many schedules due together start together. */
  concurrency?: number
}

/** Runs `work` over `items`, at most `limit` at a time. */
async function inParallel<T>(items: readonly T[], limit: number, work: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0
  const worker = async () => {
    while (next < items.length) await work(items[next++]!)
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
}

/** The firing was started by another instance meanwhile: the run made here is rolled back. */
class AlreadyStarted extends Error {}

/** The schedule cannot fire any more (its owner lost access): it is stopped, saying why. */
class Unreachable extends Error {}

/**
 * Fires due schedules (docs/guides/schedules.md). Every instance looks each tick; an occurrence is
 * claimed under FOR UPDATE SKIP LOCKED (its firing written, the schedule moved on) so exactly one
 * fires it, and its run is tied to the firing in the run's own transaction.
 */
export class ScheduleFirer {
  readonly #options: ScheduleFirerOptions
  readonly #accounts: Accounts
  #timer: NodeJS.Timeout | undefined
  #ticking: Promise<void> | undefined

  constructor(options: ScheduleFirerOptions) {
    this.#options = options
    this.#accounts = new Accounts(options.store)
  }

  start(): void {
    this.#timer = setInterval(() => void this.tick(), this.#options.tickMs ?? 1000)
    this.#timer.unref()
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    await this.#ticking
  }

  /** One look for due occurrences and stale pending firings; overlapping calls share one. */
  tick(): Promise<void> {
    this.#ticking ??= this.#tick().finally(() => (this.#ticking = undefined))
    return this.#ticking
  }

  async #tick(): Promise<void> {
    const { store, log } = this.#options
    try {
      const now = new Date()
      const claimed = await store.transaction(async (tx) => {
        const due = await lockDueSchedules(tx, now, 200)
        const fired: Array<{ firing: ScheduleFiring; schedule: Schedule }> = []
        for (const schedule of due) {
          const firing = await this.#claim(tx, schedule, now)
          if (firing) fired.push({ firing, schedule })
        }
        return fired
      })
      await inParallel(claimed, this.#options.concurrency ?? 8, ({ firing, schedule }) => this.#fire(firing, schedule))
      const staleBefore = new Date(Date.now() - (this.#options.pendingLeaseMs ?? 30_000))
      const stale = await store.transaction((tx) => lockStalePendingFirings(tx, staleBefore, 50))
      for (const firing of stale) {
        const schedule = await getSchedule(store, firing.scheduleId)
        if (schedule) await this.#fire(firing, schedule)
      }
    } catch (error) {
      log.warn({ err: error }, 'looking for due schedules failed; trying again next tick')
    }
  }

  /** Records the due occurrence (pending, or missed after downtime) and moves the schedule on. */
  async #claim(tx: Parameters<typeof recordOccurrence>[0], schedule: Schedule, now: Date) {
    const occurrence = new Date(schedule.nextFireAt!)
    let next = nextOccurrence(schedule, occurrence, occurrence)
    let skipped = 0
    if (next && next <= now) {
      if (schedule.every !== null) {
        // An interval's missed occurrences are counted, not walked: the next one is the first after now.
        skipped = Math.floor((now.getTime() - next.getTime()) / everyMs(schedule.every)!) + 1
        next = nextOccurrence(schedule, now, occurrence)
      } else {
        // A cron is walked to count what it missed, up to 1,000 (a lower bound after long downtime), then jumps.
        while (next && next <= now && skipped < 1_000) {
          skipped++
          next = nextOccurrence(schedule, next, occurrence)
        }
        if (next && next <= now) next = nextOccurrence(schedule, now, occurrence)
      }
    }
    const late = now.getTime() - occurrence.getTime() > (this.#options.graceMs ?? 60_000)
    // After downtime: `skip` records the occurrence as missed; `fireOnce` fires it, for all it missed.
    const status = late && schedule.missed === 'skip' ? 'missed' : 'pending'
    const firing = await recordOccurrence(tx, schedule, { at: occurrence, status, missedCount: skipped }, next)
    return firing?.status === 'pending' ? firing : undefined
  }

  /** A firing by hand (`POST /api/schedules/:id/run-now`): recorded and fired at once. */
  async fireNow(
    schedule: Schedule,
    within?: (tx: Executor, firing: ScheduleFiring) => Promise<void>,
  ): Promise<ScheduleFiring> {
    const { store } = this.#options
    // `within` writes with the firing's record (an Idempotency-Key's answer): both or neither.
    const firing = await store.transaction(async (tx) => {
      const recorded = await recordOccurrence(
        tx,
        schedule,
        { at: new Date(), status: 'pending', missedCount: 0, manual: true },
        undefined,
      )
      if (recorded && within) await within(tx, recorded)
      return recorded
    })
    return this.#fire(firing!, schedule)
  }

  /** Starts the firing's run; a refusal fails the firing, lost access stops the schedule. */
  async #fire(firing: ScheduleFiring, schedule: Schedule): Promise<ScheduleFiring> {
    const { store, runs, log } = this.#options
    try {
      const target = schedule.target
      if (target.kind === 'command') return await this.#dispatch(firing, schedule, target)
      // A model the operator has since removed: refused before a conversation is made for nothing.
      if (target.model !== undefined && !runs.models.get(target.model))
        throw new RequestError('unknown_model', `no model ${JSON.stringify(target.model)}; GET /api/models lists them`)
      const { owner, project, conversation } = await this.#place(firing, schedule, target)
      const created = await runs.createRun(
        conversation,
        owner.id,
        {
          input: target.input,
          ...(target.model !== undefined && { model: target.model }),
          approvalPolicy: target.approvalPolicy ?? 'dontAsk',
          ifActive: 'enqueue',
        },
        {
          project,
          onCreated: async (tx, run) => {
            if (!(await markFiringStarted(tx, firing, schedule, run.id))) throw new AlreadyStarted()
            await appendAuditEntry(tx, {
              dispatchId: null,
              step: 'schedule:fire',
              ownerId: schedule.ownerId,
              projectId: schedule.projectId,
              conversationId: conversation.id,
              commandId: null,
              entrance: null,
              envelope: {
                scheduleId: schedule.id,
                firingId: firing.id,
                occurrence: firing.occurrence,
                manual: firing.manual,
                runId: run.id,
              },
            })
          },
        },
      )
      const runId = 'run' in created ? created.run.id : null
      return { ...firing, status: 'started', conversationId: conversation.id, runId }
    } catch (error) {
      if (error instanceof AlreadyStarted) return firing
      const failure =
        error instanceof Unreachable
          ? { code: 'schedule_stopped', message: error.message }
          : error instanceof RequestError
            ? { code: error.code, message: error.message }
            : undefined
      if (error instanceof Unreachable) {
        await store.transaction((tx) => stopSchedule(tx, schedule, error.message))
        log.warn({ scheduleId: schedule.id, reason: error.message }, 'schedule stopped')
      }
      if (!failure) {
        // Anything else (the database, a bug): left pending, fired again once its claim is stale.
        log.warn(
          { err: error, scheduleId: schedule.id, firingId: firing.id },
          'a schedule firing failed; it is retried',
        )
        return firing
      }
      await markFiringFailed(store, firing.id, failure)
      return { ...firing, status: 'failed', error: failure }
    }
  }

  /**
   * A command target: dispatched from the `schedule` entrance as the schedule, for its creator. The
   * firing is the idempotency key, so a retried firing finds its dispatch instead of making another.
   */
  async #dispatch(firing: ScheduleFiring, schedule: Schedule, target: ScheduleCommandTarget): Promise<ScheduleFiring> {
    const { store, bus } = this.#options
    const { owner, project } = await this.#reach(schedule, 'write')
    const outcome = await bus.dispatch({
      commandId: target.commandId,
      params: (target.params ?? {}) as { [key: string]: JsonValue },
      entrance: 'schedule',
      actor: { type: 'schedule', id: schedule.id, onBehalfOf: owner.id },
      projectId: project.id,
      idempotencyKey: `schedule-firing:${firing.id}`,
      approvalPolicy: 'dontAsk',
    })
    if (outcome.dispatchId === null) {
      const error = 'error' in outcome ? outcome.error : { code: 'failed', message: 'the dispatch was refused' }
      const failure = { code: error.code, message: error.message }
      await markFiringFailed(store, firing.id, failure)
      return { ...firing, status: 'failed', error: failure }
    }
    const dispatchId = outcome.dispatchId
    await store.transaction((tx) => markFiringDispatched(tx, firing, schedule, dispatchId))
    return { ...firing, status: 'started', dispatchId }
  }

  /** The schedule's owner and project, while the owner may still act there; Unreachable otherwise. */
  async #reach(
    schedule: Schedule,
    action: 'create_conversation' | 'write',
  ): Promise<{ owner: User; project: Project }> {
    const owner = await this.#accounts.findUser(schedule.ownerId)
    if (!owner || owner.disabled) throw new Unreachable('its owner is disabled')
    const project = await this.#options.projects.resolve(owner, schedule.projectId, action).catch((error: unknown) => {
      if (error instanceof RequestError && (error.code === 'not_found' || error.code === 'forbidden'))
        throw new Unreachable(
          action === 'write'
            ? 'its owner can no longer act in the project'
            : 'its owner can no longer start conversations in the project',
        )
      throw error
    })
    return { owner, project }
  }

  /** Whose run it is, in which project and conversation; Unreachable when the owner lost access. */
  async #place(
    firing: ScheduleFiring,
    schedule: Schedule,
    target: ScheduleRunTarget,
  ): Promise<{ owner: User; project: Project; conversation: Conversation }> {
    const { store, conversations } = this.#options
    const { owner, project } = await this.#reach(schedule, 'create_conversation')
    const existing = target.conversation !== undefined && target.conversation !== 'new'
    const conversationId = existing ? target.conversation! : firing.conversationId
    if (conversationId) {
      const conversation = await conversations.resolve(owner, conversationId).catch((error: unknown) => {
        if (error instanceof RequestError && error.code === 'not_found')
          throw new Unreachable('its conversation is gone, or its owner can no longer see it')
        throw error
      })
      return { owner, project, conversation }
    }
    const title = `${schedule.name || 'Scheduled run'} · ${firing.occurrence}`
    // Another instance firing the same (stale) firing may have made one first: then it is on it.
    const conversation = await store.transaction(async (tx) => {
      const created = await conversations.create(tx, owner, project, title)
      if (!(await setFiringConversation(tx, firing.id, created.id))) throw new AlreadyStarted()
      return created
    })
    return { owner, project, conversation }
  }
}
