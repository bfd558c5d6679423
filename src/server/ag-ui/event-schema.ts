import { Type, type TSchema } from 'typebox'

/**
 * The AG-UI events Plinth sends, for the OpenAPI document: each SSE frame is `data: <event JSON>`.
 * The protocol's own schema (@ag-ui/core) is the reference; these list the fields Plinth fills.
 */
const text = Type.String()
const metadata = Type.Optional(
  Type.Object(
    {
      plinth: Type.Optional(
        Type.Object(
          { runId: Type.Optional(Type.String({ description: 'The Plinth run' })) },
          {
            additionalProperties: true,
            description: 'Plinth’s details: the run; a result’s status; a cancel’s reason',
          },
        ),
      ),
    },
    { additionalProperties: true, title: 'AgUiMetadata' },
  ),
)

function event(type: string, fields: Record<string, TSchema>, description: string): TSchema {
  return Type.Object({ type: Type.Literal(type), ...fields, metadata }, { description })
}

const Interrupt = Type.Object(
  {
    id: Type.String({ description: 'A decision id (answer with a resume entry) or a client-tool call id' }),
    reason: Type.Union([
      Type.Literal('tool_approval'),
      Type.Literal('account_connection'),
      Type.Literal('client_tool'),
    ]),
    message: Type.Optional(text),
    toolCallId: Type.Optional(text),
    responseSchema: Type.Optional(Type.Unknown()),
    expiresAt: Type.Optional(Type.String({ format: 'date-time' })),
    metadata,
  },
  { title: 'AgUiInterrupt' },
)

const Outcome = Type.Union([
  Type.Object({
    type: Type.Literal('success'),
    pendingToolCallIds: Type.Optional(
      Type.Array(text, { description: 'Frontend-tool calls the run waits for: answer them with tool messages' }),
    ),
  }),
  Type.Object({ type: Type.Literal('interrupt'), interrupts: Type.Array(Interrupt) }),
  Type.Object({ type: Type.Literal('cancelled') }),
])

const Usage = Type.Array(
  Type.Object({
    model: Type.Optional(text),
    inputTokens: Type.Optional(Type.Integer()),
    outputTokens: Type.Optional(Type.Integer()),
    totalTokens: Type.Optional(Type.Integer()),
  }),
)

export const AgUiEventSchema = Type.Union(
  [
    event(
      'RUN_STARTED',
      { threadId: text, runId: text, protocolVersion: Type.Optional(text) },
      'The AG-UI run began (metadata.plinth.runId: the Plinth run, to cancel or follow)',
    ),
    event(
      'STEP_STARTED',
      { stepName: Type.String({ description: '`round N`' }) },
      'A round (model call and its tool calls) began',
    ),
    event('STEP_FINISHED', { stepName: text }, 'The round ended'),
    event('TEXT_MESSAGE_START', { messageId: text, role: Type.Literal('assistant') }, 'An assistant message began'),
    event('TEXT_MESSAGE_CONTENT', { messageId: text, delta: text }, 'Text of the message'),
    event('TEXT_MESSAGE_END', { messageId: text }, 'The message is complete'),
    event(
      'TOOL_CALL_START',
      { toolCallId: text, toolCallName: text, parentMessageId: Type.Optional(text) },
      'The model called a tool (toolCallId is Plinth’s callId)',
    ),
    event('TOOL_CALL_ARGS', { toolCallId: text, delta: text }, 'The call’s arguments (JSON text, whole)'),
    event('TOOL_CALL_END', { toolCallId: text }, 'The call’s arguments are complete'),
    event(
      'TOOL_CALL_RESULT',
      { messageId: text, toolCallId: text, role: Type.Literal('tool'), content: text },
      'The call’s result (JSON text)',
    ),
    event(
      'CUSTOM',
      {
        name: Type.Literal('plinth.tool_output'),
        value: Type.Object({ toolCallId: Type.Union([text, Type.Null()]), stream: text, text }),
      },
      'Output of a program while it runs',
    ),
    event(
      'RUN_FINISHED',
      { threadId: text, runId: text, outcome: Type.Optional(Outcome), usage: Type.Optional(Usage) },
      'The AG-UI run ended: the Plinth run completed, was cancelled, or waits (interrupt / pending tool calls)',
    ),
    event(
      'RUN_ERROR',
      { message: text, code: Type.Optional(text) },
      'The run failed or expired, an answer was refused, or the stream ended before the run',
    ),
  ],
  { $id: 'AgUiEvent', description: 'An AG-UI protocol event (docs/ag-ui.md)' },
)
