import type { FastifyReply } from 'fastify'
import { Type, type Static } from 'typebox'
import { memoryJson, type DispatchOutcome } from '../../cmdbus/index.js'
import type { JsonValue } from '../../extension/index.js'
import { memoryLimits } from '../../rag/index.js'
import type { User } from '../../store/index.js'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { busProblem } from '../dispatch-answer.js'
import { idempotencyKey } from '../idempotency.js'
import { HttpProblem } from '../problem.js'
import { Decision, Id, IdParams, PageOf, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['memory']
const problem = Type.Ref('Problem')
const Scope = Type.Union([Type.Literal('user'), Type.Literal('project')])
const Name = Type.String({ minLength: 1, maxLength: memoryLimits.nameChars })

const MemoryView = Type.Object(
  {
    id: Type.String(),
    scope: Scope,
    projectId: Type.Union([Type.String(), Type.Null()]),
    namespace: Type.String(),
    key: Type.String(),
    value: Type.Unknown({ description: 'Structured data of the fact (null: none)' }),
    text: Type.String(),
    ownerId: Type.String({ description: 'Who wrote it; for a user memory, whose it is' }),
    createdAt: Type.String(),
    updatedAt: Type.String(),
    score: Type.Optional(Type.Number({ description: 'With `q`: the fused relevance (RRF)' })),
  },
  { title: 'Memory' },
)

// The lengths of the text, namespace and key are checked by the service, so a long one gets 413
// memory_too_large, not a 400 (the body limit bounds them meanwhile).
const WrittenName = Type.String({ minLength: 1 })
const MemoryCreate = Type.Object(
  {
    scope: Type.Optional(Scope),
    projectId: Type.Optional(Id),
    namespace: Type.Optional(WrittenName),
    key: Type.Optional(WrittenName),
    value: Type.Optional(Type.Unknown()),
    text: Type.String({ minLength: 1, pattern: '\\S' }),
  },
  { additionalProperties: false },
)

const MemoryPatch = Type.Object(
  { value: Type.Optional(Type.Unknown()), text: Type.Optional(Type.String({ minLength: 1, pattern: '\\S' })) },
  { additionalProperties: false },
)

const MemoryQuery = Type.Object(
  {
    scope: Type.Optional(Scope),
    projectId: Type.Optional(Id),
    namespace: Type.Optional(Name),
    q: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 2000,
        pattern: '\\S',
        description: 'Search instead of list: the best matches by words and meaning (no cursor)',
      }),
    ),
    k: Type.Optional(Type.Integer({ minimum: 1, maximum: 50, default: 10 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
)

/** What memory.remember answers (memory.forget: `forgotten`). */
type MemoryResult = { memory: Static<typeof MemoryView>; created?: boolean }

const Pending = Type.Object(
  { dispatchId: Type.String(), status: Type.Literal('awaiting_decision'), decision: Decision },
  { title: 'MemoryWritePending' },
)

/**
 * `/api/memories` (docs/guides/memory.md): reads go to the memory store; writes are the `memory.*`
 * commands dispatched from the `button` entrance, so they are audited like any effect and follow the
 * operator's confirmation rules (202 with the decision when one asks first).
 */
export function registerMemoryRoutes(app: App, deps: ServerDeps): void {
  const memories = deps.retriever.memories

  const dispatch = (
    user: User,
    commandId: string,
    params: { [key: string]: JsonValue },
    projectId: string | null,
    key: string | undefined,
  ): Promise<DispatchOutcome> =>
    deps.bus.dispatch({
      commandId,
      params,
      entrance: 'button',
      actor: { type: 'user', id: user.id, onBehalfOf: user.id },
      projectId,
      conversationId: null,
      idempotencyKey: key ?? null,
    })

  /** The command's result, or the pending decision (202), or the problem. */
  const settle = (reply: FastifyReply, outcome: DispatchOutcome): MemoryResult | undefined => {
    if (outcome.replayed) reply.header('idempotent-replayed', 'true')
    if (outcome.status === 'succeeded') return outcome.result as MemoryResult
    if (outcome.status === 'awaiting_decision') {
      void reply.code(202).send({ dispatchId: outcome.dispatchId, status: outcome.status, decision: outcome.decision })
      return undefined
    }
    throw busProblem(outcome.error, outcome.dispatchId)
  }

  app.get(
    '/memories',
    {
      schema: {
        operationId: 'listMemories',
        tags,
        summary:
          'Your memories and those of projects you can search, newest first; with `q`, the best matches (hybrid search)',
        querystring: MemoryQuery,
        response: { 200: PageOf(MemoryView), ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      const query = request.query
      const filter = {
        ...(query.scope && { scope: query.scope }),
        ...(query.projectId && { projectId: query.projectId }),
        ...(query.namespace !== undefined && { namespace: query.namespace }),
      }
      if (query.q !== undefined) {
        // The best matches are one answer, not pages: a cursor would be silently ignored.
        if (query.cursor !== undefined)
          throw new HttpProblem(
            'validation_failed',
            'querystring.cursor: a search (q) answers its best matches at once (k), without pages',
            { errors: [{ path: 'querystring.cursor', message: 'not allowed with q' }] },
          )
        const hits = await memories.recall(user.id, query.q, { ...filter, k: query.k ?? 10 })
        return { items: hits.map((hit) => ({ ...memoryJson(hit), score: hit.score })), nextCursor: null }
      }
      const after = decodeCursor(query.cursor)
      const page = await memories.list(user.id, filter, {
        limit: query.limit ?? 50,
        ...(after !== undefined && { after }),
      })
      return toListAnswer(page, memoryJson)
    },
  )

  app.post(
    '/memories',
    {
      schema: {
        operationId: 'rememberMemory',
        tags,
        summary:
          'Remember a fact (memory.remember): 201 when new, 200 when it replaced the one with the same namespace and key',
        body: MemoryCreate,
        response: { 200: MemoryView, 201: MemoryView, 202: Pending, ...problemResponses, 409: problem, 413: problem },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { projectId, ...body } = request.body
      const scope = body.scope ?? (projectId ? 'project' : 'user')
      if (scope === 'user' && projectId)
        throw new HttpProblem('validation_failed', 'body.projectId: a user memory belongs to no project; omit it', {
          errors: [{ path: 'body.projectId', message: 'not allowed with scope "user"' }],
        })
      const outcome = await dispatch(
        user,
        'memory.remember',
        { ...(body as { [key: string]: JsonValue }), scope },
        scope === 'project' ? (projectId ?? null) : null,
        idempotencyKey(request),
      )
      const result = settle(reply, outcome)
      if (!result) return reply
      return reply.code(result.created === true ? 201 : 200).send(result.memory)
    },
  )

  app.get(
    '/memories/:id',
    {
      schema: {
        operationId: 'getMemory',
        tags,
        summary: 'A memory you may see',
        params: IdParams,
        response: { 200: MemoryView, ...problemResponses },
      },
    },
    async (request) => memoryJson(await memories.get(caller(request).id, request.params.id)),
  )

  app.patch(
    '/memories/:id',
    {
      schema: {
        operationId: 'updateMemory',
        tags,
        summary: 'Change a memory’s text or value (memory.remember with its namespace and key)',
        params: IdParams,
        body: MemoryPatch,
        response: { 200: MemoryView, 202: Pending, ...problemResponses, 413: problem },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const memory = await memories.get(user.id, request.params.id)
      const outcome = await dispatch(
        user,
        'memory.remember',
        {
          scope: memory.scope,
          namespace: memory.namespace,
          key: memory.key,
          text: request.body.text ?? memory.text,
          value: (request.body.value === undefined ? memory.value : request.body.value) as JsonValue,
        },
        memory.projectId,
        idempotencyKey(request),
      )
      const result = settle(reply, outcome)
      if (!result) return reply
      return result.memory
    },
  )

  app.delete(
    '/memories/:id',
    {
      schema: {
        operationId: 'forgetMemory',
        tags,
        summary: 'Forget a memory (memory.forget): no later search or recall finds it',
        params: IdParams,
        response: { 204: Type.Null(), 202: Pending, ...problemResponses },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const key = idempotencyKey(request)
      // A retry of a forget made with this key: the memory is gone, and the answer is the one given then.
      const earlier = key === undefined ? undefined : await deps.bus.dispatchedWithKey(user.id, key)
      const retried =
        earlier?.commandId === 'memory.forget' && (earlier.params as { id?: unknown }).id === request.params.id
      const projectId = retried ? earlier.projectId : (await memories.get(user.id, request.params.id)).projectId
      const outcome = await dispatch(user, 'memory.forget', { id: request.params.id }, projectId, key)
      if (!settle(reply, outcome)) return reply
      return reply.code(204).send(null)
    },
  )
}
