import { Type } from 'typebox'
import { listAuditEnvelopes } from '../../cmdbus/index.js'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { AuditEnvelope, Id, PageOf, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

export function registerAuditRoutes(app: App, deps: ServerDeps): void {
  app.get(
    '/audit',
    {
      schema: {
        operationId: 'listAudit',
        tags: ['audit'],
        summary: 'Audit envelopes visible to the caller, newest first: one per dispatch, latest state plus history',
        querystring: Type.Object(
          {
            conversationId: Type.Optional(Id),
            projectId: Type.Optional(Id),
            commandId: Type.Optional(Type.String({ maxLength: 200 })),
            entrance: Type.Optional(
              Type.Union([
                Type.Literal('button'),
                Type.Literal('card'),
                Type.Literal('slash'),
                Type.Literal('chat'),
                Type.Literal('agent'),
                Type.Literal('mcp'),
                Type.Literal('schedule'),
              ]),
            ),
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
            cursor: Type.Optional(Type.String({ maxLength: 200 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: PageOf(AuditEnvelope), ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      const { conversationId, projectId, commandId, entrance } = request.query
      const page = await listAuditEnvelopes(
        deps.store,
        {
          userId: user.id,
          ...(conversationId && { conversationId }),
          ...(projectId && { projectId }),
          ...(commandId && { commandId }),
          ...(entrance && { entrance }),
        },
        { limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) },
      )
      return toListAnswer(page, (envelope) => envelope)
    },
  )
}
