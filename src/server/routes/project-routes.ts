import { Type } from 'typebox'
import type { EventRecord } from '../../store/index.js'
import { projectView } from '../access.js'
import { caller } from '../auth.js'
import { sseResponse } from '../event-schemas.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { serveEventStream } from '../event-stream-route.js'
import { runIdempotent } from '../idempotency.js'
import {
  Conversation,
  ConversationCreate,
  EventsQuery,
  IdParams,
  PageOf,
  PageQuery,
  problemResponses,
  Project,
  ProjectCreate,
  ProjectPatch,
} from '../schemas.js'
import { ProjectListCache } from '../project-list-cache.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['projects']

export function registerProjectRoutes(app: App, deps: ServerDeps): void {
  const { store, projects, conversations } = deps
  // Listings are cached; this instance's own project writes drop them before answering.
  const lists = new ProjectListCache(store.access)
  const changed = (projectId: string) => lists.forget(`project:${projectId}`)

  app.post(
    '/projects',
    {
      schema: {
        operationId: 'createProject',
        tags,
        summary: 'Create a project',
        body: ProjectCreate,
        response: { 201: Project, ...problemResponses, 422: Type.Ref('Problem') },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const answer = await runIdempotent(request, reply, store, user.id, 201, async (tx) =>
        projectView(await projects.create(tx, user, request.body), user),
      )
      lists.forget('all')
      return answer
    },
  )

  app.get(
    '/projects',
    {
      schema: {
        operationId: 'listProjects',
        tags,
        summary: 'Projects the caller owns (and, with sharing, may see)',
        querystring: PageQuery,
        response: { 200: PageOf(Project), ...problemResponses },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const limit = request.query.limit ?? 50
      // The answer is kept as the bytes the route's schema serialised it to.
      const known = lists.get(user.id, limit, request.query.cursor)
      if (known) return reply.type('application/json; charset=utf-8').send(known)
      const generation = lists.generation
      const page = await projects.list(user, { limit, after: decodeCursor(request.query.cursor) })
      const answer = Buffer.from(reply.serialize(toListAnswer(page, (project) => projectView(project, user))) as string)
      lists.set(user.id, limit, request.query.cursor, answer, generation)
      return reply.type('application/json; charset=utf-8').send(answer)
    },
  )

  app.get(
    '/projects/:id',
    {
      schema: {
        operationId: 'getProject',
        tags,
        summary: 'A project',
        params: IdParams,
        response: { 200: Project, ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      return projectView(await projects.resolve(user, request.params.id), user)
    },
  )

  app.patch(
    '/projects/:id',
    {
      schema: {
        operationId: 'updateProject',
        tags,
        summary:
          'Update a project: its name and description, its agent profile (system prompt, default model, model parameters, tool subset; audited), its runtime directories',
        params: IdParams,
        body: ProjectPatch,
        response: { 200: Project, ...problemResponses, 422: Type.Ref('Problem') },
      },
    },
    async (request) => {
      const user = caller(request)
      const updated = await projects.update(user, request.params.id, request.body)
      changed(updated.id)
      return projectView(updated, user)
    },
  )

  app.delete(
    '/projects/:id',
    {
      schema: {
        operationId: 'deleteProject',
        tags,
        summary: 'Delete a project (soft: history is kept)',
        params: IdParams,
        response: { 204: Type.Null(), ...problemResponses },
      },
    },
    async (request, reply) => {
      const project = await projects.remove(caller(request), request.params.id)
      changed(project.id)
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/projects/:id/conversations',
    {
      schema: {
        operationId: 'createConversation',
        tags: ['conversations'],
        summary: 'Create a conversation in a project',
        params: IdParams,
        body: ConversationCreate,
        response: { 201: Conversation, ...problemResponses, 422: Type.Ref('Problem') },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const project = await projects.resolve(user, request.params.id, 'create_conversation')
      return runIdempotent(request, reply, store, user.id, 201, (tx) =>
        conversations.create(tx, user, project, request.body.title),
      )
    },
  )

  app.get(
    '/projects/:id/conversations',
    {
      schema: {
        operationId: 'listProjectConversations',
        tags: ['conversations'],
        summary: "A project's conversations (the caller's own)",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(Conversation), ...problemResponses },
      },
    },
    async (request) => {
      const page = await conversations.listInProject(caller(request), request.params.id, {
        limit: request.query.limit ?? 50,
        after: decodeCursor(request.query.cursor),
      })
      return toListAnswer(page, (item) => item)
    },
  )

  app.get(
    '/projects/:id/events',
    {
      sse: 'manual',
      schema: {
        operationId: 'streamProjectEvents',
        tags: ['events'],
        summary:
          "SSE: the project's events the caller may see (their own conversations, never another user's); resume with Last-Event-ID or ?after=",
        params: IdParams,
        querystring: EventsQuery,
        response: {
          200: sseResponse('StreamEvent', 'The project’s events: the log after Last-Event-ID, then live'),
          ...problemResponses,
        },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const project = await projects.resolve(user, request.params.id)
      const shared = project.ownerId !== user.id
      // Events about the project itself reach everyone on it; a conversation's events only its owner
      // (it is theirs alone, the project's owner answers 404 for it too); a member sees only their own
      // decisions. Knowledge drafts are their author's alone (as in the item list).
      const filter = (event: EventRecord): boolean => {
        if (
          event.type.startsWith('knowledge.') &&
          event.userId !== user.id &&
          (event.data.item as { status?: string } | undefined)?.status !== 'published'
        )
          return false
        // Webhooks are the owner's to manage (and their URLs theirs to see).
        if (event.type.startsWith('webhook.')) return !shared
        if (event.conversationId !== null) return event.userId === user.id
        return !shared || event.userId === user.id || !event.type.startsWith('decision.')
      }
      await serveEventStream(request, reply, deps, {
        scope: { projectId: project.id },
        access: {
          projectId: project.id,
          shared,
          recheck: async () => (await deps.access.project(user.id, project.id, 'read')) !== undefined,
        },
        filter,
      })
    },
  )
}
