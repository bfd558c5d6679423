import { Type, type TSchema } from 'typebox'
import { Conversation, KnowledgeItem, MessagePart, Project, RequiredAction, RunStatus, RunUsage } from './schemas.js'

/**
 * The frames of Plinth's SSE streams, for the OpenAPI document: each frame is `id:` (absent on control
 * frames), `event:` and `data:` (JSON). A client generated from the document gets one discriminated
 * union per stream kind, keyed on `event`. Payloads list every field Plinth sends (closed, so generated
 * types have no open records; a test checks real frames against them); a client should still ignore
 * fields it does not know, as later versions may add some.
 */

const closed = { additionalProperties: false } as const
const id = Type.String({ description: 'The event id: send it back as Last-Event-ID (or ?after=) to resume after it' })

function frame(event: string, data: TSchema, description: string): TSchema {
  return Type.Object({ id, event: Type.Literal(event), data }, { description })
}

function control(event: string, data: TSchema, description: string): TSchema {
  return Type.Object(
    { event: Type.Literal(event), data },
    { description: `${description} (no id: Last-Event-ID stays the last real event)` },
  )
}

const Json = Type.Unknown()

/** A resource as events carry it: without the caller-specific fields the API adds (and untitled). */
function asStored(schema: { properties: Record<string, TSchema> }, drop: string[]): TSchema {
  return Type.Object(
    Object.fromEntries(Object.entries(schema.properties).filter(([key]) => !drop.includes(key))),
    closed,
  )
}
const nullable = (schema: TSchema): TSchema => Type.Union([schema, Type.Null()])
const ToolCallStatus = Type.Union(
  ['ok', 'error', 'rejected', 'cancelled', 'expired', 'interrupted'].map((status) => Type.Literal(status)),
)
const Phase = nullable(
  Type.Union(
    ['thinking', 'tool_called', 'tool_running', 'tool_done', 'finalizing'].map((phase) => Type.Literal(phase)),
  ),
)
const ToolCall = Type.Object(
  { callId: Type.String(), providerCallId: Type.String(), name: Type.String(), arguments: Type.String() },
  closed,
)

/** Events of one run (also on its conversation's and project's streams). */
const runEvents: TSchema[] = [
  frame('run.created', Type.Object({ run: Type.Ref('Run') }, closed), 'A run was created'),
  frame(
    'run.status',
    Type.Object(
      {
        runId: Type.String(),
        status: RunStatus,
        phase: Phase,
        requiredAction: Type.Optional(Type.Union([RequiredAction, Type.Null()])),
        resumed: Type.Optional(
          Type.Boolean({ description: 'True when the run was taken over after its instance stopped' }),
        ),
      },
      closed,
    ),
    'The run’s status or phase changed',
  ),
  frame(
    'round.started',
    Type.Object({ runId: Type.String(), iteration: Type.Integer() }, closed),
    'A model call began',
  ),
  frame(
    'message.created',
    Type.Object({ messageId: Type.String(), role: Type.String() }, closed),
    'A message was started',
  ),
  frame(
    'message.delta',
    Type.Object({ messageId: Type.String(), text: Type.String() }, closed),
    'Text streamed into a message (incremental, coalesced about every 50 ms)',
  ),
  frame(
    'message.completed',
    Type.Object(
      {
        messageId: Type.String(),
        content: nullable(Type.String()),
        toolCalls: nullable(Type.Array(ToolCall)),
        status: Type.String(),
        model: Type.Optional(
          Type.String({ description: 'An assistant message: the model that answered (the run’s, or a fallback)' }),
        ),
        finishReason: Type.Optional(
          Type.String({
            description:
              'A completed assistant message: why the model stopped — `stop`, `tool_calls`, `length` (cut at its output-token limit), `content_filter`, or what the provider said',
          }),
        ),
        parts: Type.Optional(Type.Array(MessagePart, { description: 'A user message with images: its parts' })),
      },
      closed,
    ),
    'A message is complete (authoritative content)',
  ),
  frame(
    'knowledge.injected',
    Type.Object(
      {
        runId: Type.String(),
        chunkIds: Type.Array(Type.String()),
        items: Type.Array(
          Type.Object(
            { itemId: Type.String(), chunkId: Type.String(), title: Type.String(), shared: Type.Boolean() },
            closed,
          ),
        ),
      },
      closed,
    ),
    'Project knowledge put into the prompt at the start of the run',
  ),
  frame(
    'memory.recalled',
    Type.Object(
      {
        runId: Type.String(),
        memories: Type.Array(
          Type.Object(
            {
              id: Type.String(),
              scope: Type.Union([Type.Literal('user'), Type.Literal('project')]),
              key: Type.String(),
            },
            closed,
          ),
        ),
      },
      closed,
    ),
    'Memories (the user’s and the project’s) put into the prompt at the start of the run',
  ),
  frame(
    'tool_call.created',
    Type.Object(
      {
        runId: Type.String(),
        callId: Type.String(),
        providerCallId: Type.String(),
        name: Type.String(),
        commandId: Type.Optional(nullable(Type.String())),
        kind: Type.Union([Type.Literal('command'), Type.Literal('client')]),
        args: Json,
        risk: nullable(Type.String()),
        matchedRules: Type.Optional(Type.Array(Json)),
      },
      closed,
    ),
    'The model called a tool',
  ),
  frame('tool_call.started', Type.Object({ callId: Type.String() }, closed), 'A tool call began running'),
  frame(
    'tool_call.output',
    Type.Object(
      {
        callId: nullable(Type.String()),
        dispatchId: Type.String(),
        stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]),
        text: Type.String(),
      },
      closed,
    ),
    'Output of a program while it runs (exec tools and CLIs)',
  ),
  frame(
    'tool_call.completed',
    Type.Object(
      {
        callId: Type.String(),
        status: ToolCallStatus,
        output: Json,
        modelTruncated: Type.Boolean(),
        durationMs: nullable(Type.Number()),
        repeatOf: Type.Optional(Type.String()),
      },
      closed,
    ),
    'A tool call ended (exactly one per call)',
  ),
  frame(
    'compaction.failed',
    Type.Object({ runId: Type.String(), error: Type.Object({ message: Type.String() }, closed) }, closed),
    'The summary call of context compaction failed; the run goes on without compacting',
  ),
  frame(
    'output.invalid',
    Type.Object(
      {
        runId: Type.String(),
        messageId: Type.String({ description: 'The answer that failed' }),
        attempt: Type.Integer({ description: 'Answers that failed so far' }),
        errors: Type.Array(Type.String()),
      },
      closed,
    ),
    'A final answer failed the run’s output schema; the model is asked again (structured output)',
  ),
  frame(
    'run.completed',
    Type.Object(
      {
        runId: Type.String(),
        usage: RunUsage,
        output: Type.Optional(
          Type.Unknown({ description: 'The parsed answer, when the run asked for structured output' }),
        ),
      },
      closed,
    ),
    'The run answered (terminal)',
  ),
  frame(
    'run.failed',
    Type.Object(
      {
        runId: Type.String(),
        error: Type.Object(
          {
            code: Type.String(),
            message: Type.String(),
            upstreamStatus: Type.Optional(Type.Integer()),
            budget: Type.Optional(
              Type.Object(
                {
                  scope: Type.String({ description: '`run`, `project` or `user`' }),
                  period: Type.Optional(
                    Type.String({ description: '`daily` or `monthly` (project and user budgets)' }),
                  ),
                  limit: Type.String({ description: '`maxModelCalls`, `maxTokens` or `maxCost`' }),
                  value: Type.Number(),
                  used: Type.Number(),
                  resetAt: Type.Optional(Type.String({ format: 'date-time', description: 'When the period resets' })),
                },
                closed,
              ),
            ),
            errors: Type.Optional(
              Type.Array(Type.String(), { description: 'output_invalid: what failed in the last answer' }),
            ),
          },
          closed,
        ),
        usage: RunUsage,
      },
      closed,
    ),
    'The run failed (terminal)',
  ),
  frame(
    'run.cancelled',
    Type.Object({ runId: Type.String(), reason: Type.String() }, closed),
    'The run was cancelled (terminal)',
  ),
  frame('run.expired', Type.Object({ runId: Type.String() }, closed), 'The run waited too long for action (terminal)'),
]

const decisionEvents: TSchema[] = [
  frame(
    'decision.required',
    Type.Object(
      {
        decisionId: Type.String(),
        runId: Type.Optional(nullable(Type.String())),
        callId: Type.Optional(nullable(Type.String())),
        commandId: Type.String(),
        params: Json,
        preview: Type.Optional(nullable(Type.String())),
        risk: Type.String(),
        reasons: Type.Array(Type.String()),
        expiresAt: Type.String({ format: 'date-time' }),
      },
      closed,
    ),
    'A person must approve or reject a command (POST /api/decisions/:id)',
  ),
  frame(
    'decision.resolved',
    Type.Object(
      {
        decisionId: Type.String(),
        outcome: Type.Union([Type.Literal('approved'), Type.Literal('rejected'), Type.Literal('expired')]),
        by: nullable(Type.String()),
        scope: Type.Optional(nullable(Type.Union([Type.Literal('once'), Type.Literal('session')]))),
        reply: Type.Optional(
          Type.Union([Type.Literal('edit'), Type.Literal('respond')], {
            description: 'Approved with edited params, or answered in the call’s place',
          }),
        ),
      },
      closed,
    ),
    'A decision was answered or expired',
  ),
]

const controlFrames: TSchema[] = [
  control(
    'shutdown',
    Type.Object({ reason: Type.String() }, closed),
    'The server is stopping; reconnect with the last id',
  ),
  control(
    'access_revoked',
    Type.Object({ code: Type.Literal('access_revoked'), message: Type.String() }, closed),
    'Access is gone; do not reconnect with this token',
  ),
  control(
    'reconnect',
    Type.Object({ reason: Type.String(), lastEventId: nullable(Type.String()), message: Type.String() }, closed),
    'The stream reached its maximum lifetime; reconnect with Last-Event-ID',
  ),
]

const projectEvents: TSchema[] = [
  frame('project.created', Type.Object({ project: asStored(Project, ['shared']) }, closed), 'A project was created'),
  frame(
    'project.updated',
    Type.Object({ project: asStored(Project, ['shared']) }, closed),
    'A project changed (name, profile, runtimes)',
  ),
  frame('project.deleted', Type.Object({ projectId: Type.String() }, closed), 'A project was deleted'),
  frame(
    'conversation.created',
    Type.Object({ conversation: asStored(Conversation, ['activeRunId']) }, closed),
    'A conversation was created',
  ),
  frame(
    'conversation.updated',
    Type.Object({ conversation: asStored(Conversation, ['activeRunId']) }, closed),
    'A conversation changed',
  ),
  frame(
    'conversation.deleted',
    Type.Object(
      {
        conversationId: Type.String(),
        reason: Type.Optional(Type.Literal('retention', { description: 'Retention purged it (idle too long)' })),
      },
      closed,
    ),
    'A conversation was deleted',
  ),
  frame(
    'conversation.compacted',
    Type.Object(
      {
        compactionId: Type.String(),
        conversationId: Type.String(),
        afterMessageId: Type.Union([Type.String(), Type.Null()]),
        throughMessageId: Type.String(),
        messageCount: Type.Integer(),
        model: Type.String(),
        runId: Type.Union([Type.String(), Type.Null()]),
      },
      closed,
    ),
    'The oldest messages of the conversation were summarised: later prompts send the summary instead of them (context compaction)',
  ),
  ...['knowledge.created', 'knowledge.ingested', 'knowledge.failed', 'knowledge.published', 'knowledge.deleted'].map(
    (event) =>
      frame(
        event,
        Type.Object({ item: asStored(KnowledgeItem, ['shared']) }, closed),
        'A knowledge item changed (see its ingestStatus and status)',
      ),
  ),
  frame(
    'webhook.disabled',
    Type.Object({ webhookId: Type.String(), url: Type.String(), reason: Type.String() }, closed),
    'A webhook was disabled after a run of failed deliveries (the project owner’s stream only); PATCH it with {"enabled": true} to resume',
  ),
  frame(
    'schedule.fired',
    Type.Object(
      { scheduleId: Type.String(), firingId: Type.String(), occurrence: Type.String(), runId: Type.String() },
      closed,
    ),
    'A schedule fired: its run started (docs/guides/schedules.md)',
  ),
  frame(
    'schedule.stopped',
    Type.Object({ scheduleId: Type.String(), reason: Type.String() }, closed),
    'The server stopped a schedule (e.g. its owner lost access to the project); reason says why',
  ),
  frame(
    'commands.changed',
    Type.Object({ plugin: Type.String(), commandIds: Type.Array(Type.String()) }, closed),
    'The command catalog changed at run time (an MCP server’s tools): the plugin’s commands now; re-read GET /api/commands',
  ),
  Type.Object(
    { id, event: Type.String({ pattern: '^plugin\\.[a-z0-9_-]+\\.[A-Za-z0-9_.-]+$' }), data: Json },
    { description: 'What a plugin emitted (host.emit): plugin.<name>.<type>' },
  ),
]

/** A frame of a run's stream. */
export const RunStreamEvent = Type.Union([...runEvents, ...decisionEvents, ...controlFrames], {
  $id: 'RunStreamEvent',
  description: 'A frame of a run’s SSE stream (ends after the terminal run event)',
})

/** A frame of a project's or conversation's stream. */
export const StreamEvent = Type.Union([...projectEvents, ...runEvents, ...decisionEvents, ...controlFrames], {
  $id: 'StreamEvent',
  description: 'A frame of a project’s or conversation’s SSE stream',
})

/** The OpenAPI answer of an SSE route: `text/event-stream` whose frames follow `ref`. */
export function sseResponse(ref: 'RunStreamEvent' | 'StreamEvent', description: string): TSchema {
  return Type.Unsafe({
    description,
    content: { 'text/event-stream': { schema: Type.Ref(ref) } },
  })
}
