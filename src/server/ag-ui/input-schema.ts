import { Type, type Static } from 'typebox'
import { ModelParams, RunBudget } from '../schemas.js'

/**
 * AG-UI's `RunAgentInput` as the route's body schema (for OpenAPI and the first check). Plinth closes
 * the top level, as every body it takes; messages, tools and the rest keep AG-UI's open shapes and are
 * checked in depth against @ag-ui/core's own validator (input.ts). Plinth's run options ride in
 * `forwardedProps.plinth`.
 */

const roles = ['developer', 'system', 'assistant', 'user', 'tool', 'activity', 'reasoning'] as const

const open = { additionalProperties: true } as const

/** Run options a Plinth client may pass through AG-UI (the same as `POST /api/conversations/:id/runs`). */
export const PlinthRunOptions = Type.Object(
  {
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    maxIterations: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
    ifActive: Type.Optional(
      Type.Union([Type.Literal('interrupt'), Type.Literal('enqueue')], {
        description: 'When another run is active in the conversation (otherwise 409 run_active)',
      }),
    ),
    approvalPolicy: Type.Optional(Type.Union([Type.Literal('ask'), Type.Literal('dontAsk')])),
    knowledge: Type.Optional(
      Type.Object({ autoInject: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
    ),
    modelParams: Type.Optional(ModelParams),
    budget: Type.Optional(RunBudget),
  },
  {
    additionalProperties: false,
    description: 'Plinth run options (forwardedProps.plinth); used when the input starts a new run',
  },
)

export const AgUiRunInput = Type.Object(
  {
    threadId: Type.String({ minLength: 1, maxLength: 200, description: 'The conversation id (the one in the path)' }),
    runId: Type.String({
      minLength: 1,
      maxLength: 200,
      description: 'The client’s id for this AG-UI run; echoed in RUN_STARTED and RUN_FINISHED',
    }),
    protocolVersion: Type.Optional(Type.String({ maxLength: 20 })),
    parentRunId: Type.Optional(Type.String({ maxLength: 200 })),
    state: Type.Optional(Type.Unknown({ description: 'Ignored: Plinth keeps no shared agent state' })),
    messages: Type.Array(
      Type.Object(
        { id: Type.String({ maxLength: 200 }), role: Type.Union(roles.map((role) => Type.Literal(role))) },
        open,
      ),
      {
        maxItems: 10_000,
        description:
          'The thread as the client has it. The last user message is the new run’s input; Plinth’s stored transcript is the history the model sees (earlier messages are not imported)',
      },
    ),
    tools: Type.Optional(
      Type.Array(
        Type.Object(
          {
            name: Type.String(),
            description: Type.String(),
            parameters: Type.Optional(Type.Unknown()),
            metadata: Type.Optional(Type.Unknown()),
          },
          open,
        ),
        {
          maxItems: 64,
          description:
            'Frontend tools: Plinth client tools of the new run (answered with tool messages in the next input)',
        },
      ),
    ),
    context: Type.Optional(
      Type.Array(Type.Object({ description: Type.String(), value: Type.String() }, open), {
        maxItems: 100,
        description: 'Ignored',
      }),
    ),
    forwardedProps: Type.Optional(Type.Object({ plinth: Type.Optional(PlinthRunOptions) }, open)),
    resume: Type.Optional(
      Type.Array(
        Type.Object(
          {
            interruptId: Type.String({
              description: 'A decision id, or a client-tool call id, from RUN_FINISHED’s interrupts',
            }),
            status: Type.Union([Type.Literal('resolved'), Type.Literal('cancelled')], {
              description: '`cancelled` rejects the call',
            }),
            payload: Type.Optional(
              Type.Unknown({
                description: 'A decision: {decision: approve|approve_session|reject, note?}; a client tool: its output',
              }),
            ),
            metadata: Type.Optional(Type.Unknown()),
          },
          open,
        ),
        { maxItems: 100, description: 'Answers to the interrupts of the conversation’s waiting run' },
      ),
    ),
  },
  { additionalProperties: false, title: 'AgUiRunInput', description: 'AG-UI RunAgentInput (protocol 1.0)' },
)

export type AgUiRunInput = Static<typeof AgUiRunInput>
export type PlinthRunOptions = Static<typeof PlinthRunOptions>
