import { Type } from 'typebox'
import { terminalRunStatuses, type Run } from '../../store/index.js'
import { conversationForStream } from '../access.js'
import { caller } from '../auth.js'
import { HttpProblem, notFound } from '../problem.js'
import { IdParams, ModelParams, problemResponses, RunBudget } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'
import { readUiRequest, type UiMessage } from '../ui-stream/ui-request.js'
import { serveUiStream } from '../ui-stream/ui-stream-serve.js'

const tags = ['ui-stream']

const UiMessageBody = Type.Object(
  {
    id: Type.String({ maxLength: 200 }),
    role: Type.String({ maxLength: 20 }),
    parts: Type.Array(
      Type.Object({ type: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: true }),
      { maxItems: 1000 },
    ),
    metadata: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: true },
)

const UiStreamRequest = Type.Object(
  {
    id: Type.Optional(Type.String({ maxLength: 200, description: 'The chat id: the conversation id' })),
    messages: Type.Array(UiMessageBody, {
      minItems: 1,
      maxItems: 10_000,
      description: 'useChat’s messages; only the last one is acted on (Plinth keeps the history)',
    }),
    trigger: Type.Optional(Type.Union([Type.Literal('submit-message'), Type.Literal('regenerate-message')])),
    messageId: Type.Optional(Type.Union([Type.String({ maxLength: 200 }), Type.Null()])),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    clientTools: Type.Optional(Type.Array(Type.Unknown(), { maxItems: 64 })),
    maxIterations: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
    approvalPolicy: Type.Optional(Type.Union([Type.Literal('ask'), Type.Literal('dontAsk')])),
    knowledge: Type.Optional(
      Type.Object({ autoInject: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
    ),
    modelParams: Type.Optional(ModelParams),
    budget: Type.Optional(RunBudget),
  },
  { additionalProperties: false, title: 'UiStreamRequest' },
)

const uiStreamAnswer = (description: string) =>
  Type.Unsafe({
    description,
    headers: { 'x-vercel-ai-ui-message-stream': Type.Literal('v1') },
    content: {
      'text/event-stream': {
        schema: Type.String({
          description: '`data: <UIMessageChunk JSON>` frames, then `data: [DONE]` (docs/ui-stream.md)',
        }),
      },
    },
  })

/**
 * The AI SDK's UI message stream (`useChat`) over a conversation (docs/ui-stream.md): POST starts a
 * run from the last user message, or answers the approvals and client-tool outputs the last assistant
 * message carries and continues that run; GET resumes the active run's message from its start.
 */
export function registerUiStreamRoutes(app: App, deps: ServerDeps): void {
  const { runs, runQueries, bus } = deps

  app.post(
    '/conversations/:id/ui-stream',
    {
      sse: 'manual',
      bodyLimit: 8 * 1024 * 1024,
      schema: {
        operationId: 'uiStream',
        tags,
        summary:
          'AI SDK useChat: start a run from the last user message, or answer approvals / client-tool outputs and continue the run; the answer is a UI message stream',
        params: IdParams,
        body: UiStreamRequest,
        response: {
          200: uiStreamAnswer(
            'The run as a UI message stream (protocol v1): its assistant message, whose id is the run id',
          ),
          ...problemResponses,
          // run_active, run_not_waiting; unknown_model; the body over the route's 8 MiB.
          409: Type.Ref('Problem'),
          413: Type.Ref('Problem'),
          422: Type.Ref('Problem'),
        },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { conversation, project, access } = await conversationForStream(deps, user, request.params.id)
      const {
        messages,
        id: chatId,
        trigger,
        model,
        clientTools,
        maxIterations,
        approvalPolicy,
        knowledge,
        modelParams,
        budget,
      } = request.body
      // What a run request takes, passed through useChat's `body` (docs/ui-stream.md).
      const options = { model, clientTools, maxIterations, approvalPolicy, knowledge, modelParams, budget }
      if (chatId !== undefined && chatId !== conversation.id)
        throw new HttpProblem(
          'chat_id_mismatch',
          `the chat id ${chatId} is not this conversation (${conversation.id}): use the conversation id as useChat's id`,
        )
      const asked = readUiRequest(messages as UiMessage[])
      if (trigger === 'regenerate-message' && asked.kind !== 'new')
        throw new HttpProblem(
          'invalid_ui_message',
          'regenerate-message: the last message must be the user message to answer again',
        )
      await serveUiStream(request, reply, deps, access, async () => {
        // A new question (or the same one again, regenerating): a new run with the last user message.
        if (asked.kind === 'new') {
          const defined = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined))
          const created = await runs.createRun(conversation, user.id, { input: asked.text, ...defined }, { project })
          if ('active' in created) {
            throw new HttpProblem(
              'run_active',
              `run ${created.active.id} is ${created.active.status} in this conversation; answer or cancel it first`,
              {
                activeRunId: created.active.id,
                activeStatus: created.active.status,
              },
            )
          }
          return {
            runId: created.run.id,
            conversationId: conversation.id,
            afterId: 0,
            end: { waitingAt: null, liveAfter: 0 },
          }
        }
        const run = await runQueries.resolve(user, asked.runId).catch(() => undefined)
        if (!run || run.conversationId !== conversation.id) throw notFound('run')
        if (run.status !== 'requires_action')
          throw new HttpProblem('run_not_waiting', `run ${run.id} is ${run.status}: there is nothing to answer`)
        const point = await runQueries.logPoint(run.id)
        const { unanswered, clientOutputs } = await answer(run, asked.approvals, asked.outputs)
        // Something still waits that the client did not answer: say so and end; the run stays waiting.
        if (unanswered)
          return {
            runId: run.id,
            conversationId: conversation.id,
            afterId: 0,
            end: { waitingAt: null, liveAfter: 0 },
            lead: [{ type: 'finish', finishReason: 'tool-calls' }],
            only: true,
          }
        // From where the present wait began: a call approved in an earlier request (the run still
        // waiting for another) has run since, and its output is part of what this answer continues.
        // The client tools' outputs are the client's own: it already shows them as it set them.
        return {
          runId: run.id,
          conversationId: conversation.id,
          afterId: point.waitingSince ?? point.waitingAt ?? point.lastId,
          end: {
            waitingAt: null,
            liveAfter: point.lastId,
            answered: new Set([...asked.approvals.map((approval) => approval.approvalId), ...clientOutputs]),
          },
          clientCalls: new Set(clientOutputs),
        }
      })
      return reply
    },
  )

  app.get(
    '/conversations/:id/ui-stream',
    {
      sse: 'manual',
      schema: {
        operationId: 'resumeUiStream',
        tags,
        summary:
          'AI SDK useChat resume: the active run’s whole assistant message again, then live; 204 when no run is active',
        params: IdParams,
        response: {
          200: uiStreamAnswer('The active run as a UI message stream, replayed from its start'),
          204: Type.Null({ description: 'No active run: nothing to resume' }),
          ...problemResponses,
        },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { conversation, access } = await conversationForStream(deps, user, request.params.id)
      const [withRun] = await deps.conversations.withActiveRuns([conversation])
      const run = withRun?.activeRunId ? await runQueries.get(withRun.activeRunId) : undefined
      if (!run || terminalRunStatuses.includes(run.status)) return reply.code(204).send(null)
      await serveUiStream(request, reply, deps, access, async () => {
        const point = await runQueries.logPoint(run.id)
        return {
          runId: run.id,
          conversationId: conversation.id,
          afterId: 0,
          end: { waitingAt: point.waitingAt, liveAfter: point.lastId },
        }
      })
      return reply
    },
  )

  /**
   * Answers the run's decisions and client-tool calls: whether something it waits for stays
   * unanswered, and the calls whose outputs the client gave.
   */
  async function answer(
    run: Run,
    approvals: Array<{ approvalId: string; approved: boolean; reason?: string }>,
    outputs: Array<{ callId: string; output: unknown }>,
  ): Promise<{ unanswered: boolean; clientOutputs: string[] }> {
    const user = run.ownerId
    const waiting = (run.requiredAction ?? {}) as {
      decisions?: Array<{ decisionId: string }>
      toolOutputs?: Array<{ callId: string }>
    }
    const decisionIds = new Set((waiting.decisions ?? []).map((decision) => decision.decisionId))
    for (const approval of approvals) {
      if (!decisionIds.has(approval.approvalId)) {
        // An approval answered before (the client sends its whole message again): nothing to do.
        const known = await bus.getDecision(approval.approvalId, user)
        if (known?.runId === run.id && known.status !== 'pending') continue
        throw new HttpProblem(
          'unknown_approval',
          `approval ${approval.approvalId} is not a decision this run waits for`,
        )
      }
      const outcome = await bus.decide(
        approval.approvalId,
        user,
        approval.approved ? 'approve' : 'reject',
        approval.reason,
      )
      if (!outcome.ok && outcome.error.code !== 'decision_conflict')
        throw new HttpProblem(outcome.error.code, outcome.error.message)
      decisionIds.delete(approval.approvalId)
    }
    const callIds = new Set((waiting.toolOutputs ?? []).map((call) => call.callId))
    const submitted = outputs.filter((output) => callIds.has(output.callId))
    if (submitted.length > 0 && submitted.length === callIds.size) {
      await runs.submitToolOutputs(run.id, submitted)
      callIds.clear()
    }
    return {
      unanswered: decisionIds.size > 0 || callIds.size > 0,
      clientOutputs: outputs.map((output) => output.callId),
    }
  }
}
