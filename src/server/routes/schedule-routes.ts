import { Type } from 'typebox'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { hashRequest, idempotencyKey, KeyTaken, runIdempotent, storeAnswer, storedAnswer } from '../idempotency.js'
import { HttpProblem } from '../problem.js'
import { Id, IdParams, PageOf, PageQuery, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['schedules']
const strict = { additionalProperties: false } as const
const problem = Type.Ref('Problem')

const ScheduleRunTarget = Type.Object(
  {
    kind: Type.Literal('run'),
    input: Type.String({ minLength: 1, maxLength: 100_000, description: 'The user message each run starts with' }),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    conversation: Type.Optional(
      Type.Union([Type.Literal('new'), Id], {
        description: '`new` (default): a conversation per firing; or a conversation of the project to post into',
      }),
    ),
    approvalPolicy: Type.Optional(
      Type.Union([Type.Literal('ask'), Type.Literal('dontAsk')], {
        description: 'Default `dontAsk`: nobody is watching a scheduled run',
      }),
    ),
  },
  { ...strict, title: 'ScheduleRunTarget' },
)
const ScheduleCommandTarget = Type.Object(
  {
    kind: Type.Literal('command'),
    commandId: Type.String({ minLength: 1, maxLength: 200, description: 'Dispatched from the `schedule` entrance' }),
    params: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: "The command's parameters" })),
  },
  { ...strict, title: 'ScheduleCommandTarget' },
)
const ScheduleTarget = Type.Union([ScheduleRunTarget, ScheduleCommandTarget], {
  description: 'What each firing starts: a run, or a command dispatch',
})
const timingFields = {
  cron: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 200,
      description: 'A cron expression: 5 fields, or 6 with seconds first (e.g. "0 9 * * 1-5")',
    }),
  ),
  every: Type.Optional(
    Type.String({ minLength: 2, maxLength: 12, description: 'An interval: "30s", "5m", "1h", "1d"' }),
  ),
  at: Type.Optional(Type.String({ format: 'date-time', description: 'Once, at this time' })),
  timezone: Type.Optional(
    Type.String({ minLength: 1, maxLength: 100, description: 'The IANA time zone cron is read in (default UTC)' }),
  ),
}
const settingFields = {
  name: Type.Optional(Type.String({ maxLength: 200 })),
  enabled: Type.Optional(Type.Boolean({ description: 'false pauses it' })),
  missed: Type.Optional(
    Type.Union([Type.Literal('skip'), Type.Literal('fireOnce')], {
      description: 'Occurrences missed while no instance ran: skipped (default), or fired once for all of them',
    }),
  ),
}
const ScheduleCreate = Type.Object({ ...timingFields, ...settingFields, target: ScheduleTarget }, strict)
const SchedulePatch = Type.Object(
  { ...timingFields, ...settingFields, target: Type.Optional(ScheduleTarget) },
  { ...strict, minProperties: 1 },
)
const nullableTime = Type.Union([Type.String({ format: 'date-time' }), Type.Null()])
const Schedule = Type.Object(
  {
    id: Type.String(),
    projectId: Type.String(),
    ownerId: Type.String({ description: 'Who created it: its runs are theirs' }),
    name: Type.String(),
    cron: Type.Union([Type.String(), Type.Null()]),
    every: Type.Union([Type.String(), Type.Null()]),
    at: nullableTime,
    timezone: Type.String(),
    target: ScheduleTarget,
    enabled: Type.Boolean(),
    missed: Type.Union([Type.Literal('skip'), Type.Literal('fireOnce')]),
    nextFireAt: Type.Union([nullableTime], { description: 'The next occurrence (null: paused, or none left)' }),
    lastFiredAt: nullableTime,
    lastRunId: Type.Union([Type.String(), Type.Null()]),
    stoppedReason: Type.Union([Type.String(), Type.Null()], {
      description: 'Why the server stopped it (e.g. its owner lost access); PATCH enabled: true to start it again',
    }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { title: 'Schedule' },
)
const ScheduleFiring = Type.Object(
  {
    id: Type.String(),
    scheduleId: Type.String(),
    occurrence: Type.String({ format: 'date-time' }),
    manual: Type.Boolean({ description: 'Fired by run-now' }),
    status: Type.Union(
      [Type.Literal('pending'), Type.Literal('started'), Type.Literal('failed'), Type.Literal('missed')],
      {
        description: 'started: its run exists; failed: the run was refused (see error); missed: skipped after downtime',
      },
    ),
    conversationId: Type.Union([Type.String(), Type.Null()]),
    runId: Type.Union([Type.String(), Type.Null()]),
    dispatchId: Type.Union([Type.String(), Type.Null()], {
      description: "A command target's dispatch (its audit envelope: GET /api/audit?entrance=schedule)",
    }),
    error: Type.Union([Type.Object({ code: Type.String(), message: Type.String() }), Type.Null()]),
    missedCount: Type.Integer({ description: 'Further occurrences missed with this one' }),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { title: 'ScheduleFiring' },
)

/** Scheduled runs (docs/guides/schedules.md). */
export function registerScheduleRoutes(app: App, deps: ServerDeps): void {
  const { schedules } = deps
  const page = (query: { limit?: number; cursor?: string }) => ({
    limit: query.limit ?? 50,
    after: decodeCursor(query.cursor),
  })

  app.post(
    '/projects/:id/schedules',
    {
      schema: {
        operationId: 'createSchedule',
        tags,
        summary: 'Schedule runs in a project: by cron, every interval, or once at a time',
        params: IdParams,
        body: ScheduleCreate,
        response: { 201: Schedule, ...problemResponses, 409: problem, 422: problem },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const insert = await schedules.prepare(user, request.params.id, request.body)
      return reply.send(await runIdempotent(request, reply, deps.store, user.id, 201, insert))
    },
  )

  app.get(
    '/projects/:id/schedules',
    {
      schema: {
        operationId: 'listSchedules',
        tags,
        summary: "The project's schedules",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(Schedule), ...problemResponses },
      },
    },
    async (request) =>
      toListAnswer(await schedules.list(caller(request), request.params.id, page(request.query)), (item) => item),
  )

  app.get(
    '/schedules/:id',
    {
      schema: {
        operationId: 'getSchedule',
        tags,
        summary: 'A schedule, with its next occurrence and last run',
        params: IdParams,
        response: { 200: Schedule, ...problemResponses },
      },
    },
    async (request) => schedules.get(caller(request), request.params.id),
  )

  app.patch(
    '/schedules/:id',
    {
      schema: {
        operationId: 'updateSchedule',
        tags,
        summary: 'Change a schedule; {"enabled": false} pauses it, a new timing counts from now',
        params: IdParams,
        body: SchedulePatch,
        response: { 200: Schedule, ...problemResponses, 422: problem },
      },
    },
    async (request) => schedules.update(caller(request), request.params.id, request.body),
  )

  app.delete(
    '/schedules/:id',
    {
      schema: {
        operationId: 'deleteSchedule',
        tags,
        summary: 'Delete a schedule (its firings and runs are kept)',
        params: IdParams,
        response: { 204: Type.Null(), ...problemResponses },
      },
    },
    async (request, reply) => {
      await schedules.remove(caller(request), request.params.id)
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/schedules/:id/run-now',
    {
      schema: {
        operationId: 'runScheduleNow',
        tags,
        summary: 'Fire a schedule now (paused or not): the firing, with its run',
        params: IdParams,
        response: { 201: ScheduleFiring, ...problemResponses },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const scheduleId = request.params.id
      reply.code(201)
      const key = idempotencyKey(request)
      if (key === undefined) return reply.send(await schedules.runNow(user, scheduleId))
      // A retry answers the firing the first request made, as it is now (the run keeps going).
      const requestHash = hashRequest(request)
      const replayed = async () => {
        const answer = await storedAnswer(deps.store, user.id, key, requestHash)
        const firingId = (answer?.response as { firingId?: unknown } | undefined)?.firingId
        if (typeof firingId !== 'string') return undefined
        reply.header('idempotent-replayed', 'true')
        return schedules.firing(user, scheduleId, firingId)
      }
      const previous = await replayed()
      if (previous) return reply.send(previous)
      try {
        return reply.send(
          await schedules.runNow(user, scheduleId, (tx, firing) =>
            storeAnswer(tx, user.id, key, { requestHash, statusCode: 201, response: { firingId: firing.id } }),
          ),
        )
      } catch (error) {
        if (!(error instanceof KeyTaken)) throw error
        const winner = await replayed()
        if (!winner) throw new HttpProblem('idempotency_key_in_progress')
        return reply.send(winner)
      }
    },
  )

  app.get(
    '/schedules/:id/firings',
    {
      schema: {
        operationId: 'listScheduleFirings',
        tags,
        summary: "A schedule's history: each occurrence, newest first, with its run or why it has none",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(ScheduleFiring), ...problemResponses },
      },
    },
    async (request) =>
      toListAnswer(await schedules.firings(caller(request), request.params.id, page(request.query)), (item) => item),
  )
}
