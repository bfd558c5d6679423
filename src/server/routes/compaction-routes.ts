import { Type } from 'typebox'
import type { Compaction as StoredCompaction } from '../../store/index.js'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { IdParams, PageOf, PageQuery, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['conversations']
const problem = Type.Ref('Problem')

const Compaction = Type.Object(
  {
    id: Type.String(),
    conversationId: Type.String(),
    afterMessageId: Type.Union([Type.String(), Type.Null()], {
      description: 'The range it stands for starts after this message (null: at the start)',
    }),
    throughMessageId: Type.String({ description: '…and ends with this one' }),
    messageCount: Type.Integer({ description: 'How many messages the range holds' }),
    summary: Type.String(),
    model: Type.String({ description: 'The model that wrote the summary' }),
    runId: Type.Union([Type.String(), Type.Null()], {
      description: 'The run whose start compacted (null: forced over HTTP)',
    }),
    createdAt: Type.String(),
  },
  { title: 'Compaction' },
)

const CompactBody = Type.Object(
  {
    model: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 200,
        description: 'The model whose window decides the cut (default: the project’s, else the server’s default)',
      }),
    ),
  },
  { additionalProperties: false },
)

const view = (compaction: StoredCompaction) => compaction

/** Context compaction (docs/guides/agent-runs.md#context-compaction): force one, list them. */
export function registerCompactionRoutes(app: App, deps: ServerDeps): void {
  const { conversations, runs } = deps

  app.post(
    '/conversations/:id/compact',
    {
      schema: {
        operationId: 'compactConversation',
        tags,
        summary:
          'Summarise every turn but the last into a compaction that later prompts send instead of them (the messages stay)',
        params: IdParams,
        body: Type.Optional(CompactBody),
        response: { 201: Compaction, ...problemResponses, 409: problem, 502: problem },
      },
    },
    async (request, reply) => {
      const { conversation, project } = await conversations.resolveWithProject(caller(request), request.params.id)
      const compaction = await runs.compact(conversation, project, request.body?.model)
      return reply.code(201).send(view(compaction))
    },
  )

  app.get(
    '/conversations/:id/compactions',
    {
      schema: {
        operationId: 'listCompactions',
        tags,
        summary: "A conversation's compactions, oldest first (the newest is the one prompts use)",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(Compaction), ...problemResponses },
      },
    },
    async (request) => {
      const after = decodeCursor(request.query.cursor)
      const page = await conversations.compactions(caller(request), request.params.id, {
        limit: request.query.limit ?? 50,
        ...(after !== undefined && { after }),
      })
      return toListAnswer(page, view)
    },
  )
}
