import { Type } from 'typebox'
import { runView } from '../../resources/index.js'
import type { RunStatus } from '../../store/index.js'
import { conversationForStream } from '../access.js'
import { caller } from '../auth.js'
import { busProblem } from '../dispatch-answer.js'
import { sseResponse } from '../event-schemas.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { serveEventStream } from '../event-stream-route.js'
import {
  Conversation,
  ConversationPatch,
  EventsQuery,
  IdParams,
  Message,
  PageOf,
  PageQuery,
  problemResponses,
  RunList,
  RunListQuery,
} from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['conversations']

export function registerConversationRoutes(app: App, deps: ServerDeps): void {
  const { conversations, runQueries } = deps

  app.get(
    '/conversations',
    {
      schema: {
        operationId: 'listMyConversations',
        tags,
        summary: "The caller's conversations across every project they can see, newest first",
        querystring: PageQuery,
        response: { 200: PageOf(Conversation), ...problemResponses },
      },
    },
    async (request) => {
      const page = await conversations.listMine(caller(request), {
        limit: request.query.limit ?? 50,
        after: decodeCursor(request.query.cursor),
      })
      return toListAnswer(page, (item) => item)
    },
  )

  app.get(
    '/conversations/:id',
    {
      schema: {
        operationId: 'getConversation',
        tags,
        summary: 'A conversation',
        params: IdParams,
        response: { 200: Conversation, ...problemResponses },
      },
    },
    async (request) => conversations.get(caller(request), request.params.id),
  )

  app.get(
    '/conversations/:id/runs',
    {
      schema: {
        operationId: 'listConversationRuns',
        tags: ['runs'],
        summary: "A conversation's runs, newest first (?status= filters, comma-separated)",
        params: IdParams,
        querystring: RunListQuery,
        response: { 200: RunList, ...problemResponses },
      },
    },
    async (request) => {
      const page = await runQueries.ofConversation(
        caller(request),
        request.params.id,
        statusFilter(request.query.status),
        { limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) },
      )
      return toListAnswer(page, runView)
    },
  )

  app.patch(
    '/conversations/:id',
    {
      schema: {
        operationId: 'updateConversation',
        tags,
        summary: 'Retitle a conversation or set its permission mode',
        params: IdParams,
        body: ConversationPatch,
        response: { 200: Conversation, ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      const conversation = await conversations.resolve(user, request.params.id)
      const { permissionMode, title } = request.body
      const modeChange = permissionMode !== undefined && permissionMode !== conversation.permissionMode
      if (modeChange) {
        // Through the bus, so the change has its audit envelope (core.set_permission_mode).
        const outcome = await deps.bus.dispatch({
          commandId: 'core.set_permission_mode',
          params: { mode: permissionMode },
          entrance: 'button',
          actor: { type: 'user', id: user.id, onBehalfOf: user.id },
          conversationId: conversation.id,
          projectId: conversation.projectId,
        })
        if (outcome.status !== 'succeeded')
          throw busProblem(
            outcome.status === 'awaiting_decision'
              ? { code: 'forbidden', message: 'the mode change needs a decision' }
              : outcome.error,
            outcome.dispatchId,
          )
      }
      return conversations.update(conversation, { ...(title !== undefined && { title }) }, { reread: modeChange })
    },
  )

  app.delete(
    '/conversations/:id',
    {
      schema: {
        operationId: 'deleteConversation',
        tags,
        summary: 'Delete a conversation (soft)',
        params: IdParams,
        response: { 204: Type.Null(), ...problemResponses },
      },
    },
    async (request, reply) => {
      await conversations.remove(caller(request), request.params.id)
      return reply.code(204).send(null)
    },
  )

  app.get(
    '/conversations/:id/messages',
    {
      schema: {
        operationId: 'listMessages',
        tags,
        summary: "A conversation's transcript, oldest first",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(Message), ...problemResponses },
      },
    },
    async (request) => {
      const page = await conversations.messages(caller(request), request.params.id, {
        limit: request.query.limit ?? 50,
        after: decodeCursor(request.query.cursor),
      })
      return toListAnswer(page, (message) => message)
    },
  )

  app.get(
    '/conversations/:id/events',
    {
      sse: 'manual',
      schema: {
        operationId: 'streamConversationEvents',
        tags: ['events'],
        summary: 'SSE: every event of the conversation; resume with Last-Event-ID or ?after=',
        params: IdParams,
        querystring: EventsQuery,
        response: {
          200: sseResponse('StreamEvent', 'The conversation’s events: the log after Last-Event-ID, then live'),
          ...problemResponses,
        },
      },
    },
    async (request, reply) => {
      const { conversation, access } = await conversationForStream(deps, caller(request), request.params.id)
      await serveEventStream(request, reply, deps, { scope: { conversationId: conversation.id }, access })
    },
  )
}

/** `?status=a,b` as a run filter (the schema has checked each value). */
export function statusFilter(status: string | undefined): RunStatus[] | undefined {
  return status ? (status.split(',') as RunStatus[]) : undefined
}
