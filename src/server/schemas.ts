import { Type, type Static, type TSchema } from 'typebox'
import { ModelParams, RequiredAction, RunBudget } from '../resources/index.js'

// The run's schemas are defined with its view (src/resources); routes take them from here.
export { ModelParams, RequiredAction, Run, RunStatus, RunBudget, RunUsage } from '../resources/index.js'

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

const PeriodLimits = Type.Object(
  {
    maxTokens: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 1_000_000_000_000, description: 'Input plus output tokens' }),
    ),
    maxCost: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        maximum: 1_000_000_000,
        description: 'In the configured currency (calls of models without a price count nothing)',
      }),
    ),
  },
  { additionalProperties: false, title: 'PeriodLimits' },
)
const periodFields = {
  // Per UTC day (reset at 00:00 UTC) and per calendar month in UTC.
  daily: Type.Optional(PeriodLimits),
  monthly: Type.Optional(PeriodLimits),
}

/** A user's budget (docs/guides/operating.md#budgets): the operator's cap on what they spend on every project. */
export const UserBudget = Type.Object(periodFields, { additionalProperties: false, title: 'UserBudget' })

/** A project's budget: per day and month for everyone's runs there, and its runs' default run budget. */
export const ProjectBudget = Type.Object(
  {
    ...periodFields,
    // Its runs' budget unless their request sets the limit itself.
    run: Type.Optional(RunBudget),
  },
  { additionalProperties: false, title: 'ProjectBudget' },
)

const retentionDays = (description: string) =>
  Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 36_500, description }))

/** A project's own retention (docs/guides/operating.md#retention): it can only shorten the server's. */
export const ProjectRetention = Type.Object(
  {
    runEventsDays: retentionDays("Days after a run ends that its events (the streams' replay) are kept"),
    idleConversationDays: retentionDays('Days a conversation may stay idle before its content is purged'),
    dispatchDays: retentionDays('Days a settled dispatch (and its decisions) is kept after its last change'),
    knowledgeDraftDays: retentionDays('Days an unpublished draft, or a deleted item, of knowledge is kept'),
  },
  { additionalProperties: false, title: 'ProjectRetention' },
)

/** A project's own run quota, set by the operator (docs/guides/operating.md#run-quotas). */
export const ProjectQuota = Type.Object(
  {
    maxActiveRuns: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 100_000, description: 'Runs queued or running in the project at once' }),
    ),
    runsPerMinute: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 100_000, description: 'Runs started in the project in any 60 seconds' }),
    ),
  },
  { additionalProperties: false, title: 'ProjectQuota' },
)

export const User = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    disabled: Type.Boolean(),
    budget: Type.Union([UserBudget, Type.Null()], {
      description: 'What their model calls may spend per day and month (null: no limit); set by the operator',
    }),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { title: 'User' },
)

export const ApiToken = Type.Object(
  {
    id: Type.String(),
    userId: Type.String(),
    name: Type.String(),
    prefix: Type.String(),
    createdAt: Type.String({ format: 'date-time' }),
    lastUsedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { title: 'ApiToken' },
)

export const IssuedToken = Type.Object(
  {
    ...ApiToken.properties,
    token: Type.String({ description: 'The secret. Shown once; only its sha256 is stored.' }),
  },
  { title: 'IssuedToken' },
)

/** The agent profile fields a project carries (create and update). */
const profileFields = {
  systemPrompt: Type.Optional(
    Type.Union([Type.String({ maxLength: 20_000 }), Type.Null()], {
      description: 'Added to the system prompt of every run in the project; null clears it',
    }),
  ),
  defaultModel: Type.Optional(
    Type.Union([Type.String({ minLength: 1, maxLength: 200 }), Type.Null()], {
      description: 'A configured model id (GET /api/models) runs use when they name none; null clears it',
    }),
  ),
  modelParams: Type.Optional(
    Type.Union([ModelParams, Type.Null()], { description: 'Request defaults for its runs; null clears them' }),
  ),
  tools: Type.Optional(
    Type.Union(
      [Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 200, uniqueItems: true }), Type.Null()],
      {
        description:
          'The tools its agents may use: command ids (or tool names) of exposed commands, GET /api/commands; [] for none, null for all',
      },
    ),
  ),
  injectMemberKnowledge: Type.Optional(
    Type.Union([Type.Boolean(), Type.Null()], {
      description:
        'Automatic knowledge injection and memory recall also use items published and project memories written by members other than the owner (default false: the caller’s own and the owner’s; null resets it)',
    }),
  ),
  memoryRecall: Type.Optional(
    Type.Union([Type.Boolean(), Type.Null()], {
      description:
        'Runs here recall the user’s and the project’s memories into the prompt (default true; a run’s memory.recall overrides it; null resets it)',
    }),
  ),
  budget: Type.Optional(
    Type.Union([ProjectBudget, Type.Null()], {
      description: 'What runs here may spend per day and month, and their default run budget; null removes it',
    }),
  ),
  retention: Type.Optional(
    Type.Union([ProjectRetention, Type.Null()], {
      description:
        "How many days its run events, idle conversations, settled dispatches and knowledge drafts are kept; the shorter of these and the server's retention applies; null removes it",
    }),
  ),
}

export const Project = Type.Object(
  {
    id: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    description: Type.String(),
    runtimes: Type.Array(Type.String(), {
      description:
        'Operator-declared runtime directories (exec.runtimes) mounted read-only into this project’s sandbox.',
    }),
    systemPrompt: Type.Union([Type.String(), Type.Null()]),
    defaultModel: Type.Union([Type.String(), Type.Null()]),
    modelParams: ModelParams,
    tools: Type.Union([Type.Array(Type.String()), Type.Null()], {
      description: 'Command ids its agents may call; null: every exposed tool',
    }),
    injectMemberKnowledge: Type.Boolean({
      description:
        'Whether automatic knowledge injection and memory recall also use what other members published or remembered',
    }),
    memoryRecall: Type.Boolean({ description: 'Whether runs recall memories into the prompt' }),
    budget: Type.Union([ProjectBudget, Type.Null()]),
    retention: Type.Union([ProjectRetention, Type.Null()], {
      description: "Its own retention periods (null: the server's)",
    }),
    quota: Type.Union([ProjectQuota, Type.Null()], {
      description: "Its own run quota, set by the operator (null: the server's runQuota)",
    }),
    shared: Type.Boolean({ description: 'True when the caller sees the project through sharing, not ownership.' }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { title: 'Project' },
)

export const ProjectCreate = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200, pattern: '\\S' }),
    description: Type.Optional(Type.String({ maxLength: 10_000 })),
    ...profileFields,
  },
  strict,
)

export const ProjectPatch = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: '\\S' })),
    description: Type.Optional(Type.String({ maxLength: 10_000 })),
    runtimes: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 16, uniqueItems: true }),
    ),
    ...profileFields,
  },
  strict,
)

export const PermissionMode = Type.Union([Type.Literal('manual'), Type.Literal('risky'), Type.Literal('full')])

export const Conversation = Type.Object(
  {
    id: Type.String(),
    projectId: Type.String(),
    ownerId: Type.String(),
    title: Type.String(),
    permissionMode: PermissionMode,
    modeExpiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    activeRunId: Type.Union([Type.String(), Type.Null()], {
      description: 'The run that is queued, running or waiting for action in this conversation, if any.',
    }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { title: 'Conversation' },
)

export const ConversationCreate = Type.Object({ title: Type.Optional(Type.String({ maxLength: 500 })) }, strict)

export const ConversationPatch = Type.Object(
  { title: Type.Optional(Type.String({ maxLength: 500 })), permissionMode: Type.Optional(PermissionMode) },
  strict,
)

/** A stored part of a user message (docs/guides/agent-runs.md#images-in-messages). */
export const MessagePart = Type.Union(
  [
    Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: false }),
    Type.Object(
      {
        type: Type.Literal('image'),
        path: Type.String({ description: 'The file in the conversation’s work directory' }),
        mediaType: Type.String(),
        width: Type.Integer(),
        height: Type.Integer(),
        bytes: Type.Integer(),
      },
      { additionalProperties: false },
    ),
    Type.Object(
      {
        type: Type.Literal('file'),
        filename: Type.String(),
        mediaType: Type.String(),
        bytes: Type.Integer(),
        text: Type.String({ description: 'The extracted text, what a model without native input reads' }),
        path: Type.Optional(Type.String({ description: 'The document among the conversation’s files' })),
        knowledgeId: Type.Optional(Type.String({ description: 'The knowledge item it came from' })),
      },
      { additionalProperties: false },
    ),
  ],
  { title: 'MessagePart' },
)

export const Message = Type.Object(
  {
    id: Type.String(),
    conversationId: Type.String(),
    runId: Type.Union([Type.String(), Type.Null()]),
    role: Type.Union([Type.Literal('system'), Type.Literal('user'), Type.Literal('assistant'), Type.Literal('tool')]),
    content: Type.Union([Type.String(), Type.Null()]),
    toolCalls: Type.Union([
      Type.Array(
        Type.Object(
          {
            callId: Type.String(),
            name: Type.String(),
            arguments: Type.String({ description: 'As the model sent them (JSON text)' }),
            providerCallId: Type.String(),
          },
          { additionalProperties: false },
        ),
      ),
      Type.Null(),
    ]),
    toolCallId: Type.Union([Type.String(), Type.Null()]),
    status: Type.String(),
    parts: Type.Union([Type.Array(MessagePart), Type.Null()], {
      description:
        'A user message’s parts when it has more than text: text, and images kept as files of the conversation (GET /api/conversations/:id/files/{path})',
    }),
    createdAt: Type.String({ format: 'date-time' }),
    toolStatus: Type.Optional(
      Type.Union([Type.String(), Type.Null()], {
        description: "A tool message's call outcome (ok, error, rejected…), as tool_call.completed said",
      }),
    ),
    toolOutput: Type.Optional(
      Type.Unknown({
        description:
          "A tool message's raw call output, as tool_call.completed carried it (content is the text the model read)",
      }),
    ),
  },
  { title: 'Message' },
)

export const EventsQuery = Type.Object(
  {
    after: Type.Optional(Type.String({ description: 'Replay events with a larger id (same as Last-Event-ID).' })),
    ticket: Type.Optional(
      Type.String({
        description: 'A single-use stream ticket (POST /api/stream-tickets) instead of the Authorization header',
      }),
    ),
  },
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

export const RunListQuery = Type.Object(
  {
    status: Type.Optional(
      Type.String({
        pattern:
          '^(queued|running|requires_action|completed|failed|cancelled|expired)(,(queued|running|requires_action|completed|failed|cancelled|expired))*$',
        description: 'Comma-separated statuses',
      }),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
)

export const RunList = Type.Object({
  items: Type.Array(Type.Ref('Run')),
  nextCursor: Type.Union([Type.String(), Type.Null()]),
})

/** A human-in-the-loop decision. */
export const Decision = Type.Object(
  {
    id: Type.String(),
    dispatchId: Type.String(),
    status: Type.Union([
      Type.Literal('pending'),
      Type.Literal('approved'),
      Type.Literal('rejected'),
      Type.Literal('expired'),
    ]),
    commandId: Type.String(),
    params: Type.Unknown({ description: 'The command’s params (redacted)' }),
    preview: Type.Union([Type.String(), Type.Null()]),
    risk: Type.String(),
    reasons: Type.Array(Type.String()),
    projectId: Type.Union([Type.String(), Type.Null()]),
    conversationId: Type.Union([Type.String(), Type.Null()]),
    runId: Type.Union([Type.String(), Type.Null()]),
    callId: Type.Union([Type.String(), Type.Null()]),
    scope: Type.Union([Type.Literal('once'), Type.Literal('session'), Type.Null()]),
    decidedBy: Type.Union([Type.String(), Type.Null()]),
    note: Type.Union([Type.String(), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    expiresAt: Type.String({ format: 'date-time' }),
    decidedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    kind: Type.Union([Type.Literal('approve'), Type.Literal('connect')], {
      description:
        '`connect`: the caller must first connect their account to the MCP server the call goes to (POST /api/mcp/connections/:server), which approves it',
    }),
    reply: Type.Union(
      [
        Type.Object(
          { kind: Type.Literal('edit'), params: Type.Unknown({ description: 'The params it ran with (redacted)' }) },
          { additionalProperties: false },
        ),
        Type.Object({ kind: Type.Literal('respond'), text: Type.String() }, { additionalProperties: false }),
        Type.Null(),
      ],
      {
        description:
          'Answered with `edit` (approved with these params) or `respond` (not run; the text went to the model as the result)',
      },
    ),
  },
  { title: 'Decision' },
)

/** Why a dispatch did not succeed. */
export const BusError = Type.Object(
  {
    code: Type.String(),
    message: Type.String(),
    errors: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
    reasons: Type.Optional(Type.Array(Type.String())),
    core: Type.Optional(Type.Boolean({ description: 'Raised by a core command, not a plugin' })),
  },
  { additionalProperties: false, title: 'BusError' },
)

/** Where a dispatch stands (inside a decision's answer). */
export const DispatchState = Type.Object(
  {
    dispatchId: Type.Union([Type.String(), Type.Null()]),
    status: Type.Union(
      ['succeeded', 'awaiting_decision', 'failed', 'rejected', 'expired', 'cancelled'].map((status) =>
        Type.Literal(status),
      ),
    ),
    result: Type.Optional(Type.Unknown({ description: 'The command’s result (succeeded)' })),
    decisionId: Type.Optional(Type.String()),
    error: Type.Optional(BusError),
  },
  { title: 'DispatchState' },
)

const nullableString = Type.Union([Type.String(), Type.Null()])

/** One dispatch as the audit shows it: the envelope as it stands, with the history of its steps. */
export const AuditEnvelope = Type.Object(
  {
    id: Type.String({ description: 'The dispatch id' }),
    commandId: Type.String(),
    plugin: Type.String(),
    pluginVersion: Type.String(),
    entrance: Type.String(),
    actor: Type.Object(
      { type: Type.String(), id: Type.String(), onBehalfOf: Type.Optional(nullableString) },
      { additionalProperties: true },
    ),
    projectId: nullableString,
    conversationId: nullableString,
    runId: nullableString,
    callId: nullableString,
    params: Type.Unknown({ description: 'Redacted' }),
    paramsHash: Type.String(),
    risk: nullableString,
    decision: Type.Union([
      Type.Object(
        { id: nullableString, outcome: Type.String(), by: nullableString, scope: nullableString, via: nullableString },
        { additionalProperties: true },
      ),
      Type.Null(),
    ]),
    result: Type.Unknown({ description: 'Redacted and truncated' }),
    resultHash: nullableString,
    status: Type.String(),
    error: Type.Union([
      Type.Object({ code: Type.String(), message: Type.String() }, { additionalProperties: true }),
      Type.Null(),
    ]),
    timings: Type.Object(
      {
        requestedAt: Type.String(),
        startedAt: nullableString,
        finishedAt: nullableString,
        durationMs: Type.Union([Type.Number(), Type.Null()]),
      },
      { additionalProperties: true },
    ),
    history: Type.Array(
      Type.Object({
        entryId: Type.Integer(),
        step: Type.String(),
        status: nullableString,
        at: Type.String({ format: 'date-time' }),
      }),
    ),
    origin: Type.Optional(
      Type.Record(Type.String(), Type.Unknown(), {
        description:
          'A mounted command’s source: for an MCP tool `{type: "mcp", server, serverName, serverVersion, tool, openWorldHint}`',
      }),
    ),
  },
  { additionalProperties: true, title: 'AuditEnvelope' },
)

/** A knowledge item of a project. */
export const KnowledgeItem = Type.Object(
  {
    id: Type.String(),
    projectId: Type.String(),
    ownerId: Type.String(),
    title: Type.String(),
    status: Type.Union([Type.Literal('draft'), Type.Literal('published')]),
    ingestStatus: Type.Union([Type.Literal('pending'), Type.Literal('ready'), Type.Literal('failed')]),
    ingestError: Type.Union([Type.String(), Type.Null()]),
    source: Type.Union([Type.Literal('text'), Type.Literal('file'), Type.Literal('command')]),
    filename: Type.Union([Type.String(), Type.Null()]),
    mediaType: Type.Union([Type.String(), Type.Null()]),
    byteSize: Type.Integer(),
    chunkCount: Type.Integer(),
    shared: Type.Boolean({ description: 'True when the item belongs to another user of a shared project.' }),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
    publishedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { title: 'KnowledgeItem' },
)

/**
 * An error answer (RFC 9457). Closed: every extension member Plinth sends is listed (the serializer
 * drops any other, and generated clients get no open record).
 */
export const Problem = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    code: Type.String(),
    detail: Type.Optional(Type.String()),
    instance: Type.Optional(Type.String()),
    errors: Type.Optional(
      Type.Array(Type.Object({ path: Type.String(), message: Type.String() }, { additionalProperties: false }), {
        description: 'validation_failed: each bad field',
      }),
    ),
    errorCount: Type.Optional(
      Type.Integer({
        description: 'validation_failed: how many bad fields there were when errors lists only the first ones',
      }),
    ),
    reasons: Type.Optional(Type.Array(Type.String(), { description: 'Why the risk gate or a command refused' })),
    dispatchId: Type.Optional(Type.String({ description: 'The dispatch that failed (command answers)' })),
    commandCode: Type.Optional(Type.String({ description: 'command_error: the code the plugin’s command gave' })),
    activeRunId: Type.Optional(Type.String({ description: 'run_active: the run in the way' })),
    activeStatus: Type.Optional(Type.String({ description: 'run_active: its status' })),
    awaiting: Type.Optional(
      Type.Union([RequiredAction, Type.Null()], { description: 'run_active: what it waits for (its requiredAction)' }),
    ),
    limit: Type.Optional(Type.Integer({ description: 'too_many_streams: the limit reached' })),
    decision: Type.Optional(Decision), // decision_conflict / decision_expired: the decision as it stands
    probe: Type.Optional(Type.Unknown({ description: 'sandbox_unavailable: what the sandbox probe found' })),
    pending: Type.Optional(
      Type.Array(Type.String(), {
        description: 'unknown_interrupt · unknown_tool_call (AG-UI): the decision and call ids the run waits for',
      }),
    ),
    missing: Type.Optional(
      Type.Array(Type.String(), { description: 'incomplete_resume (AG-UI): what the input left unanswered' }),
    ),
    budget: Type.Optional(
      Type.Object(
        {
          scope: Type.String({ description: '`project` or `user`' }),
          period: Type.String({ description: '`daily` or `monthly`' }),
          limit: Type.String({ description: '`maxTokens` or `maxCost`' }),
          value: Type.Number(),
          used: Type.Number(),
          resetAt: Type.String({ format: 'date-time' }),
        },
        { additionalProperties: false, description: 'budget_exceeded: the budget that is spent' },
      ),
    ),
    resetAt: Type.Optional(
      Type.String({ format: 'date-time', description: 'budget_exceeded: when the spent budget resets' }),
    ),
    quota: Type.Optional(
      Type.Object(
        {
          scope: Type.String({ description: '`user` or `project`' }),
          limit: Type.String({ description: '`maxActiveRuns` or `runsPerMinute`' }),
          value: Type.Integer(),
        },
        { additionalProperties: false, description: 'too_many_runs: the quota that is full' },
      ),
    ),
  },
  { additionalProperties: false, $id: 'Problem' },
)
