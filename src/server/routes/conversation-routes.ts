import { Type } from 'typebox'
import { deleteConversation, listMessages, updateConversation } from '../../store/index.js'
import { conversationForCaller, conversationForStream } from '../access.js'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { serveEventStream } from '../event-stream-route.js'
import { Conversation, ConversationPatch, EventsQuery, IdParams, Message, PageOf, PageQuery, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['conversations']

export function registerConversationRoutes(app: App, deps: ServerDeps): void {
  const { store } = deps

  app.get(
    '/conversations/:id',
    { schema: { tags, summary: 'A conversation', params: IdParams, response: { 200: Conversation, ...problemResponses } } },
    async (request) => conversationForCaller(deps, caller(request), request.params.id),
  )

  app.patch(
    '/conversations/:id',
    {
      schema: {
        tags,
        summary: 'Retitle a conversation or set its permission mode',
        params: IdParams,
        body: ConversationPatch,
        response: { 200: Conversation, ...problemResponses },
      },
    },
    async (request) => {
      const conversation = await conversationForCaller(deps, caller(request), request.params.id)
      return store.transaction((tx) => updateConversation(tx, conversation, request.body, { fullModeTtlMs: deps.fullModeTtlMs }))
    },
  )

  app.delete(
    '/conversations/:id',
    { schema: { tags, summary: 'Delete a conversation (soft)', params: IdParams, response: { 204: Type.Null(), ...problemResponses } } },
    async (request, reply) => {
      const conversation = await conversationForCaller(deps, caller(request), request.params.id)
      await store.transaction((tx) => deleteConversation(tx, conversation))
      return reply.code(204).send(null)
    },
  )

  app.get(
    '/conversations/:id/messages',
    {
      schema: {
        tags,
        summary: "A conversation's transcript, oldest first",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(Message), ...problemResponses },
      },
    },
    async (request) => {
      const conversation = await conversationForCaller(deps, caller(request), request.params.id)
      const page = await listMessages(store.db, conversation.id, { limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) })
      return toListAnswer(page, (message) => message)
    },
  )

  app.get(
    '/conversations/:id/events',
    {
      sse: 'manual',
      schema: {
        tags: ['events'],
        summary: 'SSE: every event of the conversation; resume with Last-Event-ID or ?after=',
        params: IdParams,
        querystring: EventsQuery,
        response: { ...problemResponses },
      },
    },
    async (request, reply) => {
      const { conversation, access } = await conversationForStream(deps, caller(request), request.params.id)
      await serveEventStream(request, reply, deps, { scope: { conversationId: conversation.id }, access })
    },
  )
}
