import { Type } from 'typebox'
import { verifyAuditChain } from '../../cmdbus/index.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { HttpProblem } from '../problem.js'
import {
  ApiToken,
  IdParams,
  IssuedToken,
  PageOf,
  PageQuery,
  problemResponses,
  Project,
  ProjectQuota,
  User,
  UserBudget,
} from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['admin']
const strict = { additionalProperties: false } as const
const UserCreate = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100, pattern: '^\\S(.*\\S)?$' }),
    tokenName: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  },
  strict,
)
const UserPatch = Type.Object(
  {
    disabled: Type.Optional(Type.Boolean()),
    budget: Type.Optional(
      Type.Union([UserBudget, Type.Null()], {
        description: 'What their model calls may spend per day and month, on every project; null removes it',
      }),
    ),
  },
  { ...strict, minProperties: 1 },
)
const ProjectAdminPatch = Type.Object(
  {
    quota: Type.Union([ProjectQuota, Type.Null()], {
      description: "The project's own run quota; null: the server's runQuota again",
    }),
  },
  strict,
)
const TokenCreate = Type.Object({ name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) }, strict)
const conflict = { 409: Type.Ref('Problem') }

/**
 * Operator routes behind `PLINTH_ADMIN_TOKEN`. Routes that issue a token secret do not honour
 * Idempotency-Key: replaying would mean storing the secret.
 */
const Settings = Type.Object(
  {
    execBackend: Type.Union([Type.Literal('direct'), Type.Literal('sandbox')]),
    sandbox: Type.Object({
      ok: Type.Boolean(),
      reason: Type.Union([Type.String(), Type.Null()]),
      cgroups: Type.String(),
      user: Type.Union([Type.String(), Type.Null()]),
      bwrapVersion: Type.Union([Type.String(), Type.Null()]),
    }),
  },
  { title: 'Settings' },
)
/** What `plinth audit verify` reports (the same fields offline and through the server). */
const AuditVerdict = Type.Object(
  {
    ok: Type.Boolean(),
    checked: Type.Integer({ description: 'Entries verified (before the first bad one)' }),
    firstBad: Type.Optional(
      Type.Object(
        { id: Type.Integer(), reason: Type.String() },
        { description: 'The first entry that does not fit the chain (absent when ok)' },
      ),
    ),
    checkpoint: Type.Optional(
      Type.Object(
        {
          throughId: Type.Integer(),
          throughHash: Type.String(),
          createdAt: Type.String({ format: 'date-time' }),
        },
        {
          description:
            'Present once retention removed the oldest entries: the signed checkpoint the walk started from (entries up to throughId are gone)',
        },
      ),
    ),
  },
  { title: 'AuditVerdict' },
)
const SettingsPatch = Type.Object(
  { execBackend: Type.Optional(Type.Union([Type.Literal('direct'), Type.Literal('sandbox')])) },
  strict,
)

export function registerAdminRoutes(app: App, deps: ServerDeps): void {
  const { accounts } = deps
  const settingsView = () => ({ execBackend: deps.exec.backendName, sandbox: deps.exec.probe })

  app.get(
    '/settings',
    {
      schema: {
        operationId: 'getSettings',
        tags,
        summary: 'Operator settings that change at run time, and the sandbox probe',
        response: { 200: Settings, ...problemResponses },
      },
    },
    async () => settingsView(),
  )

  app.patch(
    '/settings',
    {
      schema: {
        operationId: 'updateSettings',
        tags,
        summary:
          'Change run-time settings (audited). execBackend applies to the next execution on every instance; switching to sandbox runs the probe first (409 sandbox_unavailable if it fails)',
        body: SettingsPatch,
        response: { 200: Settings, ...problemResponses, ...conflict },
      },
    },
    async (request) => {
      const wanted = request.body.execBackend
      if (wanted !== undefined && wanted !== deps.exec.backendName) {
        const changed = await deps.exec.setBackend(wanted, 'admin')
        if (!changed.ok) throw new HttpProblem('sandbox_unavailable', changed.reason, { probe: deps.exec.probe })
        // Executions already waiting for a decision would now run on the server itself: theirs to approve.
        if (wanted === 'direct') await deps.bus.reserveForApprovers()
      }
      return settingsView()
    },
  )

  app.get(
    '/audit/verify',
    {
      schema: {
        operationId: 'verifyAuditChain',
        tags,
        summary:
          "Walk the audit log's hash chain (what `plinth audit verify` checks) while the server runs; ok false names the first altered, removed or reordered entry",
        response: { 200: AuditVerdict, ...problemResponses },
      },
    },
    async () => verifyAuditChain(deps.store, { ...(deps.auditKey && { secretKey: deps.auditKey }) }),
  )

  app.post(
    '/users',
    {
      schema: {
        operationId: 'createUser',
        tags,
        summary: 'Create a user and issue their first token',
        body: UserCreate,
        response: { 201: Type.Object({ user: User, token: IssuedToken }), ...problemResponses, ...conflict },
      },
    },
    async (request, reply) => {
      const issued = await accounts.createUser(request.body.name, request.body.tokenName)
      request.log.info({ userId: issued.user.id }, 'user created')
      return reply.code(201).send(issued)
    },
  )

  app.get(
    '/users',
    {
      schema: {
        operationId: 'listUsers',
        tags,
        summary: 'Users',
        querystring: PageQuery,
        response: { 200: PageOf(User), ...problemResponses },
      },
    },
    async (request) =>
      toListAnswer(
        await accounts.listUsers({ limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) }),
        (user) => user,
      ),
  )

  app.get(
    '/users/:id',
    {
      schema: {
        operationId: 'getUser',
        tags,
        summary: 'A user',
        params: IdParams,
        response: { 200: User, ...problemResponses },
      },
    },
    async (request) => accounts.user(request.params.id),
  )

  app.patch(
    '/users/:id',
    {
      schema: {
        operationId: 'updateUser',
        tags,
        summary: 'Disable or re-enable a user (disabled users cannot authenticate); set their budget per day and month',
        params: IdParams,
        body: UserPatch,
        response: { 200: User, ...problemResponses },
      },
    },
    async (request) => {
      const { disabled, budget } = request.body
      let user = await accounts.user(request.params.id)
      if (budget !== undefined) user = await accounts.setBudget(user.id, budget)
      if (disabled !== undefined) user = await accounts.setDisabled(user.id, disabled)
      return user
    },
  )

  app.patch(
    '/projects/:id',
    {
      schema: {
        operationId: 'updateProjectQuota',
        tags,
        summary: "Set a project's own run quota (active runs at once, runs started per minute)",
        params: IdParams,
        body: ProjectAdminPatch,
        response: { 200: Project, ...problemResponses },
      },
    },
    async (request) => ({
      ...(await deps.projects.setQuota(request.params.id, request.body.quota)),
      shared: false,
    }),
  )

  app.post(
    '/users/:id/tokens',
    {
      schema: {
        operationId: 'createUserToken',
        tags,
        summary: 'Issue a token (the secret is shown once)',
        params: IdParams,
        body: TokenCreate,
        response: { 201: IssuedToken, ...problemResponses },
      },
    },
    async (request, reply) => reply.code(201).send(await accounts.createToken(request.params.id, request.body.name)),
  )

  app.get(
    '/users/:id/tokens',
    {
      schema: {
        operationId: 'listUserTokens',
        tags,
        summary: "A user's tokens (no secrets)",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(ApiToken), ...problemResponses },
      },
    },
    async (request) =>
      toListAnswer(
        await accounts.listTokens(request.params.id, {
          limit: request.query.limit ?? 50,
          after: decodeCursor(request.query.cursor),
        }),
        (token) => token,
      ),
  )

  app.delete(
    '/tokens/:id',
    {
      schema: {
        operationId: 'revokeToken',
        tags,
        summary: 'Revoke a token; it stops working on the next request',
        params: IdParams,
        response: { 204: Type.Null(), ...problemResponses },
      },
    },
    async (request, reply) => {
      await accounts.revokeToken(request.params.id)
      return reply.code(204).send(null)
    },
  )
}
