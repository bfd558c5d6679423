import { Type, type Static } from 'typebox'
import { usageGroupings, type UsageFilter, type UsageGrouping } from '../../runmgr/index.js'
import { caller } from '../auth.js'
import { HttpProblem } from '../problem.js'
import { Id, problemResponses } from '../schemas.js'
import { decodeKeyCursor, encodeKeyCursor } from '../cursor.js'
import type { App, ServerDeps } from '../server-deps.js'

const UsageTotals = Type.Object({
  inputTokens: Type.Number({ description: 'Input tokens, cached input included' }),
  outputTokens: Type.Number({ description: 'Output tokens, reasoning included' }),
  cachedInputTokens: Type.Number(),
  reasoningTokens: Type.Number(),
  modelCalls: Type.Number(),
  cost: Type.Union([Type.Number(), Type.Null()], {
    description: 'Of the priced calls, in `currency`; null when none had a price',
  }),
  unpricedCalls: Type.Number({ description: 'Calls whose model has no price (not in `cost`)' }),
})

const UsageReport = Type.Object(
  {
    currency: Type.String(),
    from: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    to: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    groupBy: Type.Union([Type.String(), Type.Null()]),
    totals: UsageTotals,
    groups: Type.Array(Type.Intersect([Type.Object({ key: Type.String() }), UsageTotals])),
    nextCursor: Type.Union([Type.String(), Type.Null()]),
  },
  { title: 'UsageReport' },
)

const baseQuery = {
  projectId: Type.Optional(Id),
  from: Type.Optional(Type.String({ format: 'date-time', description: 'Calls at or after this time' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'Calls before this time' })),
  groupBy: Type.Optional(Type.Union(usageGroupings.map((grouping) => Type.Literal(grouping)))),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  cursor: Type.Optional(Type.String({ maxLength: 300, description: 'The previous page’s `nextCursor`' })),
}
const UserUsageQuery = Type.Object(
  { ...baseQuery, userId: Type.Optional({ ...Id, description: 'Only yourself' }) },
  { additionalProperties: false },
)
const AdminUsageQuery = Type.Object({ ...baseQuery, userId: Type.Optional(Id) }, { additionalProperties: false })

type UsageQuery = Static<typeof AdminUsageQuery>

/** The report a query asks for, over the given user's calls (undefined: everyone's). */
async function report(deps: ServerDeps, query: UsageQuery, userId: string | undefined) {
  const from = query.from ? new Date(query.from) : undefined
  const to = query.to ? new Date(query.to) : undefined
  if (from && to && from.getTime() > to.getTime())
    throw new HttpProblem('validation_failed', '`from` must not be after `to`', {
      errors: [{ path: '/from', message: 'must not be after `to`' }],
    })
  const filter: UsageFilter = {
    ...(userId !== undefined && { userId }),
    ...(query.projectId !== undefined && { projectId: query.projectId }),
    ...(from && { from }),
    ...(to && { to }),
  }
  const grouping = query.groupBy as UsageGrouping | undefined
  // Opaque, as every cursor: one this server did not issue is 400 invalid_cursor (with or without groupBy).
  const after = decodeKeyCursor(query.cursor)
  const result = await deps.runQueries.usage(
    filter,
    grouping && { by: grouping, limit: query.limit ?? 100, ...(after !== undefined && { after }) },
  )
  return {
    currency: deps.currency,
    from: from?.toISOString() ?? null,
    to: to?.toISOString() ?? null,
    groupBy: grouping ?? null,
    totals: result.totals,
    groups: result.groups ?? [],
    // A group's key may be '' (a compaction asked for over HTTP has no run): a key all the same.
    nextCursor: typeof result.nextCursor === 'string' ? encodeKeyCursor(result.nextCursor) : null,
  }
}

/** `GET /api/usage`: the caller's own model usage and cost (docs/guides/operating.md#usage-and-cost). */
export function registerUsageRoutes(app: App, deps: ServerDeps): void {
  app.get(
    '/usage',
    {
      schema: {
        operationId: 'getUsage',
        tags: ['usage'],
        summary:
          'Your model usage and cost: totals, optionally grouped by model, project, conversation, run, day or month (the admin API reports any user)',
        querystring: UserUsageQuery,
        response: { 200: UsageReport, ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      if (request.query.userId !== undefined && request.query.userId !== user.id)
        throw new HttpProblem('forbidden', 'only your own usage; the admin API (GET /api/admin/usage) reports any user')
      // A project the caller cannot see is not found, as everywhere else (not an empty report).
      if (request.query.projectId !== undefined) await deps.projects.resolve(user, request.query.projectId)
      return report(deps, request.query, user.id)
    },
  )
}

/** `GET /api/admin/usage`: anyone's usage, or everyone's (the operator's admin token). */
export function registerAdminUsageRoutes(app: App, deps: ServerDeps): void {
  app.get(
    '/usage',
    {
      schema: {
        operationId: 'adminGetUsage',
        tags: ['admin'],
        summary: 'Model usage and cost of one user (`userId`) or of all, optionally grouped (also by user)',
        querystring: AdminUsageQuery,
        response: { 200: UsageReport, ...problemResponses },
      },
    },
    async (request) => report(deps, request.query, request.query.userId),
  )
}
