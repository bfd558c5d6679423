import type { CommandCatalog } from '../cmdbus/index.js'
import type { ModelRegistry } from '../llm/index.js'
import type { ConversationService, ProjectService } from '../runmgr/index.js'
import {
  createSchedule,
  deleteSchedule,
  getFiring,
  getSchedule,
  listFirings,
  lockedScheduleCount,
  listSchedules,
  notFoundError,
  RequestError,
  updateSchedule,
  type Executor,
  type Page,
  type PageRequest,
  type Schedule,
  type ScheduleFiring,
  type ScheduleInput,
  type Store,
  type User,
} from '../store/index.js'
import type { ScheduleFirer } from './schedule-firer.js'
import { nextOccurrence, timingErrors, type ScheduleTiming } from './schedule-spec.js'

/** Schedules one project may hold (not counting deleted ones). */
export const maxSchedulesPerProject = 1000

export interface ScheduleServiceDeps {
  store: Store
  projects: ProjectService
  conversations: ConversationService
  models: ModelRegistry
  catalog: CommandCatalog
  firer: ScheduleFirer
}

/**
 * A project's schedules (docs/guides/schedules.md). Whoever may edit the project creates them; each
 * fires as its creator, who alone may change it or fire it by hand (others may pause or delete it).
 */
export class ScheduleService {
  readonly #deps: ScheduleServiceDeps

  constructor(deps: ScheduleServiceDeps) {
    this.#deps = deps
  }

  /**
   * Checks a new schedule (the project, its timing and target) and answers how to write it in a
   * transaction (with an Idempotency-Key's answer). The checks read outside it: on the embedded
   * database, whose one session the transaction holds, a read from inside would wait for ever.
   */
  async prepare(
    user: User,
    projectId: string,
    input: ScheduleInput & Required<Pick<ScheduleInput, 'target'>>,
  ): Promise<(tx: Executor) => Promise<Schedule>> {
    const project = await this.#deps.projects.resolve(user, projectId, 'write')
    const timing = this.#timing(input)
    await this.#checkTarget(user, project.id, input)
    const enabled = input.enabled ?? true
    return async (tx) => {
      // Bounded: every schedule is work the firer does for everyone on the instance (docs/guides/schedules.md).
      if ((await lockedScheduleCount(tx, project.id)) >= maxSchedulesPerProject)
        throw new RequestError(
          'too_many_schedules',
          `this project already holds ${maxSchedulesPerProject} schedules; delete some first`,
        )
      return createSchedule(tx, {
        ...input,
        projectId: project.id,
        ownerId: user.id,
        nextFireAt: enabled ? firstOccurrence(timing, new Date()) : null,
      })
    }
  }

  async list(user: User, projectId: string, page: PageRequest): Promise<Page<Schedule>> {
    const project = await this.#deps.projects.resolve(user, projectId, 'read')
    return listSchedules(this.#deps.store, project.id, page)
  }

  /** A schedule in a project the caller may read (not found otherwise). */
  async get(user: User, scheduleId: string, action: 'read' | 'write' = 'read'): Promise<Schedule> {
    const schedule = await getSchedule(this.#deps.store, scheduleId)
    if (!schedule) throw notFoundError('schedule')
    await this.#deps.projects.resolve(user, schedule.projectId, action)
    return schedule
  }

  /** Changes it; a new timing or `enabled: true` counts the next occurrence from now. */
  async update(user: User, scheduleId: string, change: ScheduleInput): Promise<Schedule> {
    const schedule = await this.get(user, scheduleId, 'write')
    // Its runs are its owner's (with their access): others who may edit the project may pause it or
    // delete it, never change what it runs as someone else.
    const pausing = Object.keys(change).length === 1 && change.enabled === false
    if (schedule.ownerId !== user.id && !pausing)
      throw new RequestError('forbidden', "only the schedule's owner may change it; you may pause or delete it")
    const retimed = change.cron !== undefined || change.every !== undefined || change.at !== undefined
    const merged: ScheduleInput = {
      ...(retimed && { cron: change.cron ?? null, every: change.every ?? null, at: change.at ?? null }),
      ...(change.timezone !== undefined && { timezone: change.timezone }),
    }
    const timing = this.#timing({ ...schedule, ...merged })
    if (change.target) await this.#checkTarget(user, schedule.projectId, change)
    const enabled = change.enabled ?? schedule.enabled
    const resumed = change.enabled === true && !schedule.enabled
    const now = new Date()
    const nextFireAt = !enabled
      ? null
      : retimed || change.timezone !== undefined || resumed
        ? firstOccurrence(timing, now)
        : schedule.nextFireAt === null
          ? null
          : new Date(schedule.nextFireAt)
    const updated = await updateSchedule(this.#deps.store, schedule.id, {
      ...change,
      ...merged,
      nextFireAt,
      ...(resumed && { stoppedReason: null }),
    })
    if (!updated) throw notFoundError('schedule')
    return updated
  }

  async remove(user: User, scheduleId: string): Promise<void> {
    const schedule = await this.get(user, scheduleId, 'write')
    await deleteSchedule(this.#deps.store, schedule.id)
  }

  async firings(user: User, scheduleId: string, page: PageRequest): Promise<Page<ScheduleFiring>> {
    const schedule = await this.get(user, scheduleId)
    return listFirings(this.#deps.store, schedule.id, page)
  }

  /**
   * Fires it now, whatever its timing (even paused): the firing, with its run. `within` writes in the
   * transaction that records the firing (an Idempotency-Key's answer).
   */
  async runNow(
    user: User,
    scheduleId: string,
    within?: (tx: Executor, firing: ScheduleFiring) => Promise<void>,
  ): Promise<ScheduleFiring> {
    const schedule = await this.get(user, scheduleId, 'write')
    if (schedule.ownerId !== user.id)
      throw new RequestError('forbidden', "only the schedule's owner may fire it: its run is theirs")
    return this.#deps.firer.fireNow(schedule, within)
  }

  /** One of a schedule's firings, as it is now. */
  async firing(user: User, scheduleId: string, firingId: string): Promise<ScheduleFiring> {
    const schedule = await this.get(user, scheduleId)
    const firing = await getFiring(this.#deps.store, firingId)
    if (!firing || firing.scheduleId !== schedule.id) throw notFoundError('firing')
    return firing
  }

  #timing(input: ScheduleInput): ScheduleTiming {
    const timing: ScheduleTiming = {
      cron: input.cron ?? null,
      every: input.every ?? null,
      at: input.at ?? null,
      timezone: input.timezone ?? 'UTC',
    }
    const errors = timingErrors(timing)
    if (errors.length > 0)
      throw new RequestError(
        'validation_failed',
        errors.map((error) => `${error.path}: ${error.message}`).join('; '),
        errors,
      )
    return timing
  }

  async #checkTarget(user: User, projectId: string, input: ScheduleInput): Promise<void> {
    const target = input.target
    if (!target) return
    if (target.kind === 'command') {
      const command = this.#deps.catalog.get(target.commandId)
      const refuse = (message: string) => {
        throw new RequestError('validation_failed', `body.target.commandId: ${message}`, [
          { path: 'body.target.commandId', message },
        ])
      }
      if (!command) refuse(`no command ${JSON.stringify(target.commandId)} (GET /api/commands lists them)`)
      else if (command.spec.entrances && !command.spec.entrances.includes('schedule'))
        refuse(`${target.commandId} cannot be dispatched from the schedule entrance`)
      return
    }
    if (target.model !== undefined && !this.#deps.models.get(target.model))
      throw new RequestError(
        'unknown_model',
        `body.target.model: no model ${JSON.stringify(target.model)}; GET /api/models lists them`,
      )
    if (target.conversation !== undefined && target.conversation !== 'new') {
      const conversation = await this.#deps.conversations.resolve(user, target.conversation)
      if (conversation.projectId !== projectId)
        throw new RequestError('validation_failed', 'body.target.conversation: a conversation of this project', [
          { path: 'body.target.conversation', message: 'not a conversation of this project' },
        ])
    }
  }
}

/**
 * The next occurrence from now of an enabled schedule; 400 when there is none: it would be accepted
 * enabled and never fire (an `at` in the past, a cron that matches no date such as 31 February).
 */
function firstOccurrence(timing: ScheduleTiming, now: Date): Date {
  const next = nextOccurrence(timing, now, now)
  if (next) return next
  const [path, message] =
    timing.cron !== null
      ? ['body.cron', `${JSON.stringify(timing.cron)} matches no date to come: the schedule would never fire`]
      : ['body.at', 'is not in the future: the schedule would never fire']
  throw new RequestError('validation_failed', `${path}: ${message}`, [{ path, message }])
}
