import { Type } from 'typebox'
import type { JsonValue, Run as RunRecord } from '../store/index.js'
import { viewOf } from './view-of.js'

/** Sampling parameters: a project's defaults, a run's overrides (unset: the model's configuration). */
export const ModelParams = Type.Object(
  {
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    maxTokens: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 1_000_000, description: 'Most tokens the model may write per turn' }),
    ),
    topP: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1 })),
    stop: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 4, description: 'Stop sequences' }),
    ),
  },
  { additionalProperties: false, title: 'ModelParams' },
)

/** What a run's model calls used (docs/guides/operating.md#usage-and-cost). */
export const RunUsage = Type.Object(
  {
    inputTokens: Type.Integer({ description: 'Input tokens, cached input included' }),
    outputTokens: Type.Integer({ description: 'Output tokens, reasoning included' }),
    cachedInputTokens: Type.Integer({ description: 'Input tokens the provider read from its cache' }),
    reasoningTokens: Type.Integer({ description: 'Output tokens spent reasoning (where the provider says)' }),
    modelCalls: Type.Integer({ description: 'Model calls made (a retried call counts once)' }),
    cost: Type.Union([Type.Number(), Type.Null()], {
      description: "In the configured currency (`currency`); null when a call's model has no price",
    }),
    byModel: Type.Optional(
      Type.Record(
        Type.String(),
        Type.Object({
          inputTokens: Type.Integer(),
          outputTokens: Type.Integer(),
          cachedInputTokens: Type.Integer(),
          reasoningTokens: Type.Integer(),
          modelCalls: Type.Integer(),
          cost: Type.Union([Type.Number(), Type.Null()]),
        }),
        { description: 'The same, split by the model that answered each call (a fallback answers some)' },
      ),
    ),
  },
  { title: 'RunUsage' },
)

/** The most a run may spend (docs/guides/operating.md#budgets): each limit optional. */
export const RunBudget = Type.Object(
  {
    maxModelCalls: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000, description: 'Model calls' })),
    maxTokens: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 1_000_000_000, description: 'Input plus output tokens' }),
    ),
    maxCost: Type.Optional(
      Type.Number({ exclusiveMinimum: 0, maximum: 1_000_000, description: 'In the configured currency' }),
    ),
  },
  { additionalProperties: false, title: 'RunBudget' },
)

/** What a run in requires_action waits for: decisions and client-tool outputs. */
export const RequiredAction = Type.Object(
  {
    decisions: Type.Array(
      Type.Object(
        {
          decisionId: Type.String(),
          callId: Type.String(),
          name: Type.String(),
          commandId: Type.String(),
          risk: Type.String(),
          args: Type.Unknown(),
          kind: Type.Optional(
            Type.Union([Type.Literal('approve'), Type.Literal('connect')], {
              description: '`connect`: the user must first connect their account to an MCP server (`connect`)',
            }),
          ),
          connect: Type.Optional(
            Type.Object(
              {
                server: Type.String(),
                path: Type.String({
                  description: 'POST it to get the authorization URL; connecting approves the call',
                }),
              },
              { additionalProperties: false },
            ),
          ),
        },
        {
          additionalProperties: false,
          description:
            'A tool call waiting for a person: answer decisionId with POST /api/decisions/:id (kind `connect`: connect the account instead)',
        },
      ),
    ),
    toolOutputs: Type.Array(Type.Object({ callId: Type.String(), name: Type.String(), args: Type.Unknown() }), {
      description: 'Client-tool calls to answer with POST /api/runs/:id/tool-outputs',
    }),
  },
  { title: 'RequiredAction' },
)

export const RunStatus = Type.Union(
  ['queued', 'running', 'requires_action', 'completed', 'failed', 'cancelled', 'expired'].map((status) =>
    Type.Literal(status),
  ),
)

/** A run as the API shows it (`GET /api/runs/:id`, `run.created`, webhooks' `run.*`). */
export const Run = Type.Object(
  {
    id: Type.String(),
    conversationId: Type.String(),
    projectId: Type.String(),
    model: Type.String(),
    status: RunStatus,
    phase: Type.Union([
      Type.Literal('thinking'),
      Type.Literal('tool_called'),
      Type.Literal('tool_running'),
      Type.Literal('tool_done'),
      Type.Literal('finalizing'),
      Type.Null(),
    ]),
    iteration: Type.Integer(),
    maxIterations: Type.Integer(),
    approvalPolicy: Type.Union([Type.Literal('ask'), Type.Literal('dontAsk')]),
    modelParams: Type.Object(ModelParams.properties, {
      description:
        'The project’s parameters with this run’s overrides (the model’s configured defaults apply to the rest)',
    }),
    requiredAction: Type.Union([RequiredAction, Type.Null()]),
    error: Type.Union([
      Type.Object(
        { code: Type.String(), message: Type.String(), upstreamStatus: Type.Optional(Type.Integer()) },
        { additionalProperties: true },
      ),
      Type.Null(),
    ]),
    usage: RunUsage,
    budget: Type.Union([RunBudget, Type.Null()], {
      description: 'The most it may spend, checked before each model call (null: no limit)',
    }),
    cancelReason: Type.Union([Type.String(), Type.Null()]),
    output: Type.Unknown({
      description:
        'The final answer parsed and validated against the request’s `output.schema` (null until then, or without one)',
    }),
    queue: Type.Union(
      [
        Type.Object(
          {
            reason: Type.Union([Type.Literal('conversation'), Type.Literal('quota')], {
              description:
                '`conversation`: behind another run of its conversation; `quota`: a run quota is full (queue mode)',
            }),
            position: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], {
              description:
                'Its place among the runs waiting for the same user’s or project’s quota (1: next); null where not computed (lists, events)',
            }),
          },
          { additionalProperties: false },
        ),
        Type.Null(),
      ],
      { description: 'Why a queued run waits (null unless `queued`)' },
    ),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
    startedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    endedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { $id: 'Run' },
)

/**
 * A run as the API shows it, rendered from the store's record by the schema above: a property the
 * record has under the schema's name is taken as it is, so a field is added in the schema alone.
 */
export const runView = viewOf<RunRecord, typeof Run>(Run, {
  modelParams: (run) => run.profile.modelParams as { [key: string]: JsonValue },
  queue: (run) =>
    run.status === 'queued'
      ? { reason: run.queuedFor ?? 'conversation', position: run.queuedFor ? (run.queuePosition ?? null) : null }
      : null,
})
