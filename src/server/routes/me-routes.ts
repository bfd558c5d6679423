import { caller } from '../auth.js'
import { problemResponses, User } from '../schemas.js'
import type { App } from '../server-deps.js'

export function registerMeRoutes(app: App): void {
  app.get(
    '/me',
    {
      schema: {
        operationId: 'getMe',
        tags: ['identity'],
        summary: 'The caller',
        response: { 200: User, ...problemResponses },
      },
    },
    async (request) => caller(request),
  )
}
