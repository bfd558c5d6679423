import { Type, type Static, type TSchema } from 'typebox'

/** Request bodies and query strings reject unknown fields. */
const strict = { additionalProperties: false } as const

/** Every id Plinth issues is a ULID (26 Crockford base32 characters); anything else is a 400, not a lookup. */
export const Id = Type.String({ pattern: '^[0-9A-HJKMNP-TV-Z]{26}$', description: 'A ULID' })

export const IdParams = Type.Object({ id: Id }, strict)

export const PageQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
  },
  strict,
)
export type PageQuery = Static<typeof PageQuery>

/** `{items, nextCursor}` of any item schema. */
export function PageOf<T extends TSchema>(item: T) {
  return Type.Object({ items: Type.Array(item), nextCursor: Type.Union([Type.String(), Type.Null()]) })
}

export const Problem = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    code: Type.String(),
    detail: Type.Optional(Type.String()),
    instance: Type.Optional(Type.String()),
    errors: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
  },
  { additionalProperties: true, $id: 'Problem' },
)

export const User = Type.Object({
  id: Type.String(),
  name: Type.String(),
  disabled: Type.Boolean(),
  createdAt: Type.String({ format: 'date-time' }),
})

export const ApiToken = Type.Object({
  id: Type.String(),
  userId: Type.String(),
  name: Type.String(),
  prefix: Type.String(),
  createdAt: Type.String({ format: 'date-time' }),
  lastUsedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
})

export const IssuedToken = Type.Object({
  ...ApiToken.properties,
  token: Type.String({ description: 'The secret. Shown once; only its sha256 is stored.' }),
})

/** Sampling parameters: a project's defaults, a run's overrides (unset: the model's configuration). */
export const ModelParams = Type.Object(
  {
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    maxTokens: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000, description: 'Most tokens the model may write per turn' })),
    topP: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1 })),
    stop: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 4, description: 'Stop sequences' })),
  },
  strict,
)

/** The agent profile fields a project carries (create and update). */
const profileFields = {
  systemPrompt: Type.Optional(Type.Union([Type.String({ maxLength: 20_000 }), Type.Null()], { description: 'Added to the system prompt of every run in the project; null clears it' })),
  defaultModel: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 200 }), Type.Null()], { description: 'A configured model id (GET /api/models) runs use when they name none; null clears it' })),
  modelParams: Type.Optional(ModelParams),
  tools: Type.Optional(
    Type.Union([Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 200, uniqueItems: true }), Type.Null()], {
      description: 'The tools its agents may use: command ids (or tool names) of exposed commands, GET /api/commands; [] for none, null for all',
    }),
  ),
}

export const Project = Type.Object(
  {
    id: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    description: Type.String(),
    runtimes: Type.Array(Type.String(), { description: 'Operator-declared runtime directories (exec.runtimes) mounted read-only into this project’s sandbox.' }),
    systemPrompt: Type.Union([Type.String(), Type.Null()]),
    defaultModel: Type.Union([Type.String(), Type.Null()]),
    modelParams: ModelParams,
    tools: Type.Union([Type.Array(Type.String()), Type.Null()], { description: 'Command ids its agents may call; null: every exposed tool' }),
    shared: Type.Boolean({ description: 'True when the caller sees the project through sharing, not ownership.' }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
)

export const ProjectCreate = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    description: Type.Optional(Type.String({ maxLength: 10_000 })),
    ...profileFields,
  },
  strict,
)

export const ProjectPatch = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    description: Type.Optional(Type.String({ maxLength: 10_000 })),
    runtimes: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 16, uniqueItems: true })),
    ...profileFields,
  },
  strict,
)

export const PermissionMode = Type.Union([Type.Literal('manual'), Type.Literal('risky'), Type.Literal('full')])

export const Conversation = Type.Object({
  id: Type.String(),
  projectId: Type.String(),
  ownerId: Type.String(),
  title: Type.String(),
  permissionMode: PermissionMode,
  modeExpiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  activeRunId: Type.Union([Type.String(), Type.Null()], { description: 'The run that is queued, running or waiting for action in this conversation, if any.' }),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
})

export const ConversationCreate = Type.Object({ title: Type.Optional(Type.String({ maxLength: 500 })) }, strict)

export const ConversationPatch = Type.Object(
  { title: Type.Optional(Type.String({ maxLength: 500 })), permissionMode: Type.Optional(PermissionMode) },
  strict,
)

export const Message = Type.Object({
  id: Type.String(),
  conversationId: Type.String(),
  runId: Type.Union([Type.String(), Type.Null()]),
  role: Type.Union([Type.Literal('system'), Type.Literal('user'), Type.Literal('assistant'), Type.Literal('tool')]),
  content: Type.Union([Type.String(), Type.Null()]),
  toolCalls: Type.Union([Type.Array(Type.Unknown()), Type.Null()]),
  toolCallId: Type.Union([Type.String(), Type.Null()]),
  status: Type.String(),
  createdAt: Type.String({ format: 'date-time' }),
})

export const EventsQuery = Type.Object(
  { after: Type.Optional(Type.String({ description: 'Replay events with a larger id (same as Last-Event-ID).' })) },
  strict,
)

/** Error answers every authenticated route may give. */
export const problemResponses = {
  400: Type.Ref('Problem'),
  401: Type.Ref('Problem'),
  403: Type.Ref('Problem'),
  404: Type.Ref('Problem'),
  429: Type.Ref('Problem'),
} as const

export const RunStatus = Type.Union(
  ['queued', 'running', 'requires_action', 'completed', 'failed', 'cancelled', 'expired'].map((status) => Type.Literal(status)),
)

/** A run as the API shows it. */
export const Run = Type.Object(
  {
    id: Type.String(),
    conversationId: Type.String(),
    projectId: Type.String(),
    model: Type.String(),
    status: RunStatus,
    phase: Type.Union([Type.Literal('thinking'), Type.Literal('tool_called'), Type.Literal('tool_running'), Type.Literal('tool_done'), Type.Literal('finalizing'), Type.Null()]),
    iteration: Type.Integer(),
    maxIterations: Type.Integer(),
    approvalPolicy: Type.Union([Type.Literal('ask'), Type.Literal('dontAsk')]),
    modelParams: Type.Object(ModelParams.properties, { description: 'The project’s parameters with this run’s overrides (the model’s configured defaults apply to the rest)' }),
    requiredAction: Type.Union([
      Type.Object({
        decisions: Type.Array(Type.Record(Type.String(), Type.Unknown())),
        toolOutputs: Type.Array(Type.Object({ callId: Type.String(), name: Type.String(), args: Type.Unknown() })),
      }),
      Type.Null(),
    ]),
    error: Type.Union([Type.Object({ code: Type.String(), message: Type.String(), upstreamStatus: Type.Optional(Type.Integer()) }, { additionalProperties: true }), Type.Null()]),
    usage: Type.Object({ inputTokens: Type.Integer(), outputTokens: Type.Integer() }),
    cancelReason: Type.Union([Type.String(), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
    startedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    endedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { $id: 'Run' },
)

export const RunListQuery = Type.Object(
  {
    status: Type.Optional(Type.String({ pattern: '^(queued|running|requires_action|completed|failed|cancelled|expired)(,(queued|running|requires_action|completed|failed|cancelled|expired))*$', description: 'Comma-separated statuses' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
)

export const RunList = Type.Object({ items: Type.Array(Type.Ref('Run')), nextCursor: Type.Union([Type.String(), Type.Null()]) })
