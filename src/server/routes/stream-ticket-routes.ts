import { Type } from 'typebox'
import { caller } from '../auth.js'
import { HttpProblem } from '../problem.js'
import { problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

/** How long a stream ticket may wait before it is used. */
const ticketTtlMs = 60_000

export const streamPathPattern = '^/api/(runs|conversations|projects)/[0-9A-Z]{26}/events$'

const TicketRequest = Type.Object(
  { path: Type.String({ pattern: streamPathPattern, description: 'The stream to open, e.g. /api/runs/{id}/events' }) },
  { additionalProperties: false },
)
const Ticket = Type.Object(
  {
    ticket: Type.String({ description: 'Single use; put it in the stream URL as ?ticket=' }),
    expiresAt: Type.String({ format: 'date-time' }),
    url: Type.String({ description: 'The path with the ticket, ready for new EventSource(url)' }),
  },
  { title: 'StreamTicket' },
)

/**
 * `POST /api/stream-tickets`: for browsers, whose EventSource cannot send Authorization. The ticket
 * opens one stream, once, within a minute, as the token that asked for it (revoking that token
 * invalidates it too). The stream checks access exactly as with the header.
 */
export function registerStreamTicketRoutes(app: App, deps: ServerDeps): void {
  app.post(
    '/stream-tickets',
    {
      schema: {
        operationId: 'createStreamTicket',
        tags: ['events'],
        summary: 'A single-use ticket to open one event stream without an Authorization header (EventSource)',
        body: TicketRequest,
        response: { 201: Ticket, ...problemResponses },
      },
    },
    async (request, reply) => {
      caller(request)
      if (!request.tokenId) throw new HttpProblem('unauthorized')
      const issued = await deps.accounts.issueStreamTicket(request.tokenId, request.body.path, ticketTtlMs)
      return reply
        .code(201)
        .send({ ...issued, url: `${request.body.path}?ticket=${encodeURIComponent(issued.ticket)}` })
    },
  )
}
