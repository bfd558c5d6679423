import { Type } from 'typebox'
import { conversationForStream } from '../access.js'
import type * as AgUi from '../ag-ui/entry.js'
import { AgUiRunInput } from '../ag-ui/input-schema.js'
import { caller } from '../auth.js'
import { HttpProblem } from '../problem.js'
import { IdParams, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const problem = Type.Ref('Problem')

let loading: Promise<typeof AgUi> | undefined
const loadAgUi = (): Promise<typeof AgUi> => (loading ??= import('../ag-ui/entry.js'))

/** AG-UI (docs/ag-ui.md): a conversation as an AG-UI agent, its threadId being the conversation id. */
export function registerAgUiRoutes(app: App, deps: ServerDeps): void {
  app.post(
    '/conversations/:id/ag-ui',
    {
      sse: 'manual',
      schema: {
        operationId: 'runAgUi',
        tags: ['runs'],
        summary:
          'AG-UI: run the conversation as an AG-UI agent (RunAgentInput in, AG-UI events over SSE out). The last user message starts a run; ' +
          'resume entries (decision ids) and tool messages answer the waiting run and continue its stream. Stop: POST /api/runs/:id/cancel',
        params: IdParams,
        body: AgUiRunInput,
        response: {
          200: Type.Unsafe({
            description: 'AG-UI events (SSE `data:` frames), RUN_STARTED to RUN_FINISHED or RUN_ERROR',
            content: { 'text/event-stream': { schema: Type.Ref('AgUiEvent') } },
          }),
          ...problemResponses,
          409: problem,
          422: problem,
          503: problem,
        },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { parseRunAgentInput, planAgUiRun, serveAgUiStream } = await loadAgUi()
      const input = parseRunAgentInput(request.body)
      const target = await conversationForStream(deps, user, request.params.id)
      if (input.threadId !== target.conversation.id) {
        throw new HttpProblem(
          'thread_mismatch',
          `threadId ${JSON.stringify(input.threadId)} is not this conversation; the AG-UI threadId is the conversation id`,
        )
      }
      await serveAgUiStream(request, reply, deps, target.access, () =>
        planAgUiRun(deps, user, target, input, request.body.forwardedProps?.plinth),
      )
    },
  )
}
