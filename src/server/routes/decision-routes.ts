import { Type } from 'typebox'
import type { DecisionAnswer, DecisionAnswerDetail } from '../../cmdbus/index.js'
import type { JsonValue } from '../../extension/index.js'
import type { DecisionStatus } from '../../store/index.js'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { outcomeView } from '../dispatch-answer.js'
import { HttpProblem } from '../problem.js'
import { Decision, DispatchState, Id, IdParams, PageOf, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['decisions']
const problem = Type.Ref('Problem')
const Answer = Type.Union([
  Type.Literal('approve'),
  Type.Literal('approve_session'),
  Type.Literal('reject'),
  Type.Literal('edit'),
  Type.Literal('respond'),
])
/** An answer's fields besides the decision itself (docs/guides/commands-and-decisions.md#edit-or-respond). */
const answerFields = {
  decision: Answer,
  note: Type.Optional(Type.String({ maxLength: 2000 })),
  params: Type.Optional(
    Type.Record(Type.String(), Type.Unknown(), {
      description: '`edit`: the params to run with instead (checked against the command’s schema)',
    }),
  ),
  text: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 20_000,
      description: '`respond`: the answer the model gets as the call’s result (the command does not run)',
    }),
  ),
}
const detailOf = (body: { params?: Record<string, unknown>; text?: string }): DecisionAnswerDetail => ({
  ...(body.params && { params: body.params as JsonValue }),
  ...(body.text !== undefined && { text: body.text }),
})
const DecideResult = Type.Object({ decision: Decision, dispatch: DispatchState })

export function registerDecisionRoutes(app: App, deps: ServerDeps): void {
  const { bus } = deps

  app.get(
    '/decisions',
    {
      schema: {
        operationId: 'listDecisions',
        tags,
        summary: 'Decisions the caller may answer (filter by status and conversation)',
        querystring: Type.Object(
          {
            status: Type.Optional(
              Type.Union([
                Type.Literal('pending'),
                Type.Literal('approved'),
                Type.Literal('rejected'),
                Type.Literal('expired'),
              ]),
            ),
            conversationId: Type.Optional(Id),
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
            cursor: Type.Optional(Type.String({ maxLength: 200 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: PageOf(Decision), ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      const page = await bus.listDecisions(
        user.id,
        {
          ...(request.query.status && { status: request.query.status as DecisionStatus }),
          ...(request.query.conversationId && { conversationId: request.query.conversationId }),
        },
        { limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) },
      )
      return toListAnswer(page, (decision) => decision)
    },
  )

  app.get(
    '/decisions/:id',
    {
      schema: {
        operationId: 'getDecision',
        tags,
        summary: 'One decision the caller may act on (its preview, risk, status and answer)',
        params: IdParams,
        response: { 200: Decision, ...problemResponses },
      },
    },
    async (request) => {
      const decision = await bus.getDecision(request.params.id, caller(request).id)
      if (!decision) throw new HttpProblem('not_found', 'decision not found')
      return decision
    },
  )

  app.post(
    '/decisions/:id',
    {
      schema: {
        operationId: 'decide',
        tags,
        summary:
          'Answer a decision: approve (once), approve_session, reject, edit (approve with changed params) or respond (do not run; the text is the result)',
        params: IdParams,
        body: Type.Object(answerFields, { additionalProperties: false }),
        response: { 200: DecideResult, ...problemResponses, 409: problem },
      },
    },
    async (request) => {
      const user = caller(request)
      const outcome = await bus.decide(
        request.params.id,
        user.id,
        request.body.decision as DecisionAnswer,
        request.body.note,
        detailOf(request.body),
      )
      if (!outcome.ok) {
        throw new HttpProblem(
          outcome.error.code,
          outcome.error.message,
          outcome.decision ? { decision: outcome.decision } : {},
        )
      }
      return { decision: outcome.decision, dispatch: outcomeView(outcome.dispatch) }
    },
  )

  app.post(
    '/decisions',
    {
      schema: {
        operationId: 'decideMany',
        tags,
        summary: 'Answer several decisions (parallel tool calls); each item succeeds or fails on its own',
        body: Type.Object(
          {
            items: Type.Array(Type.Object({ id: Id, ...answerFields }, { additionalProperties: false }), {
              minItems: 1,
              maxItems: 100,
            }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            items: Type.Array(
              Type.Object({
                id: Type.String(),
                ok: Type.Boolean(),
                decision: Type.Optional(Decision),
                dispatch: Type.Optional(DispatchState),
                error: Type.Optional(Type.Object({ code: Type.String(), message: Type.String() })),
              }),
            ),
          }),
          ...problemResponses,
        },
      },
    },
    async (request) => {
      const user = caller(request)
      const items = []
      // In order, one at a time: answers to decisions of one run resume it once all are in.
      for (const item of request.body.items) {
        const outcome = await bus.decide(item.id, user.id, item.decision as DecisionAnswer, item.note, detailOf(item))
        items.push(
          outcome.ok
            ? { id: item.id, ok: true, decision: outcome.decision, dispatch: outcomeView(outcome.dispatch) }
            : { id: item.id, ok: false, error: outcome.error, ...(outcome.decision && { decision: outcome.decision }) },
        )
      }
      return { items }
    },
  )
}
