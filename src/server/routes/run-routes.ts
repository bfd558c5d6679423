import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { runView } from '../../resources/index.js'
import { RunRequestError } from '../../runmgr/index.js'
import { terminalRunStatuses, type EventRecord, type Run } from '../../store/index.js'
import { conversationForStream, type ConversationStreamAccess } from '../access.js'
import { decodeCursor, decodeKeyCursor, encodeKeyCursor, toListAnswer } from '../cursor.js'
import { statusFilter } from './conversation-routes.js'
import { caller } from '../auth.js'
import { sseResponse } from '../event-schemas.js'
import { fileLimits, InputPart, resolveInput } from '../input-parts.js'
import { checkedResumePoint, serveEventStream } from '../event-stream-route.js'
import { hashRequest, idempotencyKey, KeyTaken, storeAnswer, storedAnswer } from '../idempotency.js'
import { HttpProblem } from '../problem.js'
import {
  EventsQuery,
  IdParams,
  Message,
  ModelParams,
  PageQuery,
  RunBudget,
  problemResponses,
  Run as RunSchema,
  RunList,
  RunListQuery,
} from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'
import type { StreamHandle } from '../stream-registry.js'

const tags = ['runs']
const problem = Type.Ref('Problem')
const RunView = Type.Ref('Run')
const WaitedRun = Type.Object(
  { ...RunSchema.properties, messages: Type.Array(Message, { description: 'The run’s messages, oldest first' }) },
  { title: 'RunWithMessages' },
)
const maxWaitSeconds = 120
const defaultWaitSeconds = 30
const terminalEvents = new Set(['run.completed', 'run.failed', 'run.cancelled', 'run.expired'])

const RunCreate = Type.Object(
  {
    input: Type.Union(
      [
        Type.String({ minLength: 1, maxLength: 200_000 }),
        Type.Array(InputPart, {
          minItems: 1,
          maxItems: 64,
          description: 'Text and images (docs/guides/agent-runs.md#images-in-messages)',
        }),
      ],
      {
        description:
          'The message: text, or an array of parts ({type: "text", text} | {type: "image", url | fileId} | {type: "file", fileId | knowledgeId})',
      },
    ),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    clientTools: Type.Optional(Type.Array(Type.Unknown(), { maxItems: 64 })),
    maxIterations: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
    ifActive: Type.Optional(Type.Union([Type.Literal('interrupt'), Type.Literal('enqueue')])),
    approvalPolicy: Type.Optional(Type.Union([Type.Literal('ask'), Type.Literal('dontAsk')])),
    knowledge: Type.Optional(
      Type.Object(
        {
          autoInject: Type.Optional(
            Type.Boolean({
              description: 'Put the top project-knowledge hits for the message into the prompt (default true)',
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    memory: Type.Optional(
      Type.Object(
        {
          recall: Type.Optional(
            Type.Boolean({
              description:
                'Put the memories best matching the message into the prompt (default: the project’s memoryRecall, true); false: an isolated run (the memory tools still work)',
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    modelParams: Type.Optional(ModelParams),
    budget: Type.Optional(RunBudget),
    output: Type.Optional(
      Type.Object(
        {
          schema: Type.Record(Type.String(), Type.Unknown(), {
            description: 'A JSON Schema the final answer must follow (tools run as usual before it)',
          }),
          name: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$', description: 'Default `output`' })),
          strict: Type.Optional(Type.Boolean({ description: 'OpenAI’s strict schema mode (default false)' })),
          maxRepairs: Type.Optional(
            Type.Integer({
              minimum: 0,
              maximum: 5,
              description:
                'Answers asked for again, with what failed, after one fails the schema (default 2); then the run fails `output_invalid`',
            }),
          ),
        },
        { additionalProperties: false, description: 'Structured output (docs/guides/agent-runs.md#structured-output)' },
      ),
    ),
  },
  { additionalProperties: false },
)

export function registerRunRoutes(app: App, deps: ServerDeps): void {
  const { runs, store, runQueries } = deps

  app.get(
    '/models',
    {
      schema: {
        operationId: 'listModels',
        tags: ['models'],
        summary: 'Configured models (never keys)',
        response: {
          200: Type.Object({
            items: Type.Array(
              Type.Object({
                id: Type.String(),
                provider: Type.String(),
                supportsTools: Type.Boolean(),
                contextWindow: Type.Integer(),
                default: Type.Boolean(),
              }),
            ),
            nextCursor: Type.Union([Type.String(), Type.Null()]),
          }),
          ...problemResponses,
        },
        // A cursor carries a model id, which may be long.
        querystring: Type.Object(
          { ...PageQuery.properties, cursor: Type.Optional(Type.String({ maxLength: 2000 })) },
          { additionalProperties: false },
        ),
      },
    },
    async (request) => {
      // In the configured order; a cursor is the last id of the page before.
      const all = runs.models.list()
      const after = decodeKeyCursor(request.query.cursor)
      const start = after === undefined ? 0 : all.findIndex((model) => model.id === after) + 1
      if (after !== undefined && start === 0)
        throw new HttpProblem('invalid_cursor', 'cursor names no configured model; start again without it')
      const limit = request.query.limit ?? 50
      const page = all.slice(start, start + limit)
      return {
        items: page.map((model) => ({
          id: model.id,
          provider: model.provider,
          supportsTools: model.supportsTools,
          contextWindow: model.contextWindow,
          default: model.id === runs.models.defaultId,
        })),
        nextCursor: start + limit < all.length ? encodeKeyCursor(page.at(-1)!.id) : null,
      }
    },
  )

  app.post(
    '/conversations/:id/runs',
    {
      sse: 'dual',
      // Inline images: one of the 5 MiB an image may be is 6.7 MiB as base64 (docs/reference/http-api.md).
      bodyLimit: 8 * 1024 * 1024,
      schema: {
        operationId: 'createRun',
        tags,
        summary:
          'Post a user message and start a run (201, the run with its messages so far); with Accept: text/event-stream the answer is the run’s stream. ' +
          `Create and wait: ?wait=true (${defaultWaitSeconds} s) or Prefer: wait=N (≤ ${maxWaitSeconds} s) answers when the run ends or needs action (201, with its messages), ` +
          'or, past the wait, with the run as it is (202 and Retry-After)',
        params: IdParams,
        querystring: Type.Object({ wait: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
        body: RunCreate,
        response: {
          // One JSON body per status, so a generated client reads status and messages of either
          // without narrowing; the stream is a separate media type of the 201.
          201: Type.Unsafe({
            description:
              'The run with its messages so far: just created (no wait), or settled — ended or waiting for action — within the wait. ' +
              'With Accept: text/event-stream, its stream instead',
            content: {
              'application/json': { schema: WaitedRun },
              'text/event-stream': { schema: Type.Ref('RunStreamEvent') },
            },
          }),
          202: Type.Unsafe({
            description:
              'Still queued or running after the wait: the run with its messages so far; ask again after Retry-After seconds (GET /api/runs/:id)',
            headers: { 'retry-after': Type.Integer({ description: 'Seconds' }) },
            content: { 'application/json': { schema: WaitedRun } },
          }),
          ...problemResponses,
          409: problem,
          422: problem,
          503: problem,
        },
      },
    },
    async (request, reply) => {
      const openedAt = Date.now()
      const user = caller(request)
      // What decides the run's admission (quota counts, period budgets) is read with the conversation.
      const standing = runs.standingReads(user.id)
      const { conversation, project, access, reads } = await conversationForStream(
        deps,
        user,
        request.params.id,
        standing.reads,
      )
      // A waiting request holds its connection like a stream: it counts against the same caps (per
      // token and in all; 429 too_many_streams, checked before anything is created) and ends early
      // when the caller's access goes.
      const waitSeconds = reply.sse ? null : requestedWait(request.query.wait, request.headers.prefer)
      // A stream's slot too is taken first: a 429 never leaves a run nobody watches.
      const slot =
        waitSeconds === null && !reply.sse
          ? null
          : deps.streams.open({ ...access, userId: user.id, tokenId: request.tokenId ?? '' }, openedAt)
      try {
        return await answer(slot)
      } finally {
        slot?.release()
      }

      async function answer(slot: StreamHandle | null): Promise<unknown> {
        const key = idempotencyKey(request)
        const requestHash = key === undefined ? '' : hashRequest(request)
        // A retry with the same Idempotency-Key answers the run the first request created (as it is now).
        const replayed = async (): Promise<Run | undefined> => {
          const answer = key === undefined ? undefined : await storedAnswer(store, user.id, key, requestHash)
          const runId = (answer?.response as { runId?: unknown } | undefined)?.runId
          if (typeof runId !== 'string') return undefined
          reply.header('idempotent-replayed', 'true')
          return runQueries.get(runId)
        }
        let created: { run: Run } | { active: Run } | undefined
        const previous = await replayed()
        if (previous) created = { run: previous }
        else {
          try {
            const { text, parts } = await resolveInput(deps.exec.workdirs, conversation.id, request.body.input, {
              extract: (filename, bytes) => deps.ingestor.extractDocument(filename, bytes),
              // Knowledge of the conversation's project the caller may see.
              knowledge: async (id) => {
                const item = await deps.knowledge.item(user, id)
                if (item.projectId !== conversation.projectId) throw new Error('another project')
                const text = await deps.knowledge.text(item, fileLimits.maxTextChars + 1)
                return {
                  title: item.title,
                  filename: item.filename,
                  mediaType: item.mediaType,
                  text: text?.text ?? null,
                }
              },
            })
            created = await runs.createRun(
              conversation,
              user.id,
              { ...request.body, input: text, ...(parts && { parts }) },
              {
                project,
                standing: { check: standing, values: reads },
                ...(key !== undefined && {
                  onCreated: (tx, run) =>
                    storeAnswer(tx, user.id, key, { requestHash, statusCode: 201, response: { runId: run.id } }),
                  // The active run may be the one this key made (a concurrent retry): replay it, never end it.
                  beforeSupersede: async () => {
                    if (await storedAnswer(store, user.id, key, requestHash)) throw new KeyTaken()
                  },
                }),
              },
            )
          } catch (error) {
            // Over a quota: the run that took the last slot may be the one a concurrent retry with this
            // key made, which this request answers as its own.
            const full = key !== undefined && error instanceof RunRequestError && error.code === 'too_many_runs'
            if (!(error instanceof KeyTaken) && !full) throw error
            const winner = await replayed()
            if (!winner) throw full ? error : new HttpProblem('idempotency_key_in_progress')
            created = { run: winner }
          }
        }
        // Refused for the active run: it may be the one a concurrent request with this key just made.
        if ('active' in created && key !== undefined) {
          const winner = await replayed()
          if (winner) created = { run: winner }
        }
        if ('active' in created) {
          throw new HttpProblem(
            'run_active',
            `run ${created.active.id} is ${created.active.status} in this conversation; wait, cancel it, or send ifActive: "interrupt" or "enqueue"`,
            {
              activeRunId: created.active.id,
              activeStatus: created.active.status,
              awaiting: created.active.requiredAction,
            },
          )
        }
        if (reply.sse) {
          reply.code(201)
          return streamRun(request, reply, deps, created.run, access, slot ?? undefined)
        }
        if (waitSeconds === null || !slot)
          return reply.code(201).send({ ...runView(created.run), messages: await runQueries.messages(created.run.id) })
        const { run, settled } = await runs.waitUntilSettled(created.run.id, waitSeconds * 1000, {
          signal: slot.signal,
        })
        const messages = await runQueries.messages(run.id)
        if (settled) return reply.code(201).send({ ...runView(run), messages })
        reply.header('preference-applied', `wait=${waitSeconds}`)
        return reply
          .code(202)
          .header('retry-after', 5)
          .send({ ...runView(run), messages })
      }
    },
  )

  app.get(
    '/runs',
    {
      schema: {
        operationId: 'listRuns',
        tags,
        summary:
          "The caller's runs across conversations, newest first — e.g. ?status=requires_action for everything waiting on them",
        querystring: RunListQuery,
        response: { 200: RunList, ...problemResponses },
      },
    },
    async (request) => {
      const page = await runQueries.listMine(caller(request), statusFilter(request.query.status), {
        limit: request.query.limit ?? 50,
        after: decodeCursor(request.query.cursor),
      })
      return toListAnswer(page, runView)
    },
  )

  app.get(
    '/runs/:id',
    {
      schema: {
        operationId: 'getRun',
        tags,
        summary:
          `A run. Wait for it: ?wait=true (${defaultWaitSeconds} s) or Prefer: wait=N (≤ ${maxWaitSeconds} s) answers when the run ends or needs action, ` +
          'or, past the wait, with the run as it is (with Preference-Applied and Retry-After): ask again',
        params: IdParams,
        querystring: Type.Object({ wait: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
        response: { 200: RunView, ...problemResponses, 429: problem },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const run = await runQueries.resolve(user, request.params.id)
      const waitSeconds = requestedWait(request.query.wait, request.headers.prefer)
      if (!waitSeconds || terminalRunStatuses.includes(run.status) || run.status === 'requires_action')
        return runView(run)
      // Held like a stream: it counts against the same caps and ends early when access goes.
      const { access } = await conversationForStream(deps, user, run.conversationId)
      const slot = deps.streams.open({ ...access, userId: user.id, tokenId: request.tokenId ?? '' }, Date.now())
      // A caller that gave up frees its slot at once.
      const gone = new AbortController()
      const onClose = (): void => gone.abort()
      reply.raw.once('close', onClose)
      try {
        const waited = await runs.waitUntilSettled(run.id, waitSeconds * 1000, {
          signal: AbortSignal.any([slot.signal, gone.signal]),
        })
        if (!waited.settled) reply.header('preference-applied', `wait=${waitSeconds}`).header('retry-after', 1)
        return runView(waited.run)
      } finally {
        reply.raw.off('close', onClose)
        slot.release()
      }
    },
  )

  app.post(
    '/runs/:id/cancel',
    {
      schema: {
        operationId: 'cancelRun',
        tags,
        summary: 'Cancel a run (a finished run is returned unchanged)',
        params: IdParams,
        // No fields: a body, if any, is an empty object (unknown fields are refused as everywhere).
        body: Type.Optional(Type.Object({}, { additionalProperties: false })),
        response: { 200: RunView, ...problemResponses },
      },
    },
    async (request) => {
      const run = await runQueries.resolve(caller(request), request.params.id)
      return runView((await runs.cancel(run.id)) ?? run)
    },
  )

  app.post(
    '/runs/:id/resume',
    {
      schema: {
        operationId: 'resumeRun',
        tags,
        summary:
          'Resume a run that failed upstream (or was interrupted, or lost its model) from its last checkpoint; no completed tool call runs again',
        params: IdParams,
        body: Type.Optional(
          Type.Object(
            {
              // Raise the run's budget (limits not given are kept); needed after budget_exceeded.
              budget: Type.Optional(RunBudget),
            },
            { additionalProperties: false },
          ),
        ),
        response: { 200: RunView, ...problemResponses, 409: problem, 422: problem, 503: problem },
      },
    },
    async (request) => {
      const run = await runQueries.resolve(caller(request), request.params.id)
      // Refusals are RunRequestErrors: run_not_resumable, run_active, unknown_model, shutting_down,
      // too_many_runs and budget_exceeded.
      const budget = request.body?.budget
      return runView(await runs.resume(run.id, budget ? { budget } : {}))
    },
  )

  app.post(
    '/runs/:id/tool-outputs',
    {
      schema: {
        operationId: 'submitToolOutputs',
        tags,
        summary: 'Results of client-side tool calls the run awaits',
        params: IdParams,
        body: Type.Object(
          {
            outputs: Type.Array(
              Type.Object(
                {
                  callId: Type.String({
                    pattern: '^[0-9A-HJKMNP-TV-Z]{26}$',
                    description:
                      'A callId from requiredAction.toolOutputs (a ULID); one the run does not await answers 409 run_not_waiting',
                  }),
                  output: Type.Unknown(),
                },
                { additionalProperties: false },
              ),
              { minItems: 1, maxItems: 64 },
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: RunView, ...problemResponses, 409: problem },
      },
    },
    async (request) => {
      const run = await runQueries.resolve(caller(request), request.params.id)
      // A call not awaited is a RunRequestError run_not_waiting.
      return runView(await runs.submitToolOutputs(run.id, request.body.outputs))
    },
  )

  app.get(
    '/runs/:id/events',
    {
      sse: 'manual',
      schema: {
        operationId: 'streamRunEvents',
        tags: ['events'],
        summary: 'SSE of one run; ends after its terminal event',
        params: IdParams,
        querystring: EventsQuery,
        response: {
          200: sseResponse(
            'RunStreamEvent',
            'The run’s events from the start (or after Last-Event-ID); ends after the terminal run event',
          ),
          204: Type.Null({
            description: 'The run has ended and there is nothing after Last-Event-ID: stop reconnecting',
          }),
          ...problemResponses,
        },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const run = await runQueries.own(user, request.params.id)
      const { access } = await conversationForStream(deps, user, run.conversationId)
      await streamRun(request, reply, deps, run, access)
    },
  )
}

/** A run's stream: replay, then live until its terminal event (a finished run: replay and close). */
async function streamRun(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: ServerDeps,
  run: Run,
  access: ConversationStreamAccess,
  handle?: StreamHandle,
): Promise<void> {
  // A failed run that was resumed goes on after its `run.failed`: the stream ends at the run's last end.
  const isTerminal = (event: EventRecord): boolean | Promise<boolean> =>
    terminalEvents.has(event.type) &&
    (event.type !== 'run.failed' || deps.runQueries.hasEventsAfter(run.id, event.id).then((more) => !more))
  if (terminalRunStatuses.includes(run.status)) {
    // A finished run with nothing after the client's id: 204, which tells an EventSource not to
    // reconnect (an empty 200 would make it reconnect for ever).
    if (!(await deps.runQueries.hasEventsAfter(run.id, await checkedResumePoint(request, deps.store)))) {
      reply.code(204).send()
      return
    }
  }
  await serveEventStream(request, reply, deps, {
    scope: { runId: run.id },
    access,
    until: isTerminal,
    ...(handle && { handle }),
  })
}

/** Seconds to wait for a new run to settle: `?wait=true`, or `Prefer: wait=N` (RFC 7240); null for no wait. */
function requestedWait(wait: boolean | undefined, prefer: string | string[] | undefined): number | null {
  const header = Array.isArray(prefer) ? prefer.join(',') : (prefer ?? '')
  const match = /(?:^|[,;\s])wait=(\d{1,6})/i.exec(header)
  if (match) return Math.min(Number(match[1]), maxWaitSeconds)
  return wait ? defaultWaitSeconds : null
}
