import { Type } from 'typebox'
import { createToken, createUser, getToken, getUser, listTokens, listUsers, revokeToken, setUserDisabled } from '../../store/index.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { HttpProblem, notFound } from '../problem.js'
import { ApiToken, IdParams, IssuedToken, PageOf, PageQuery, problemResponses, User } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['admin']
const strict = { additionalProperties: false } as const
const UserCreate = Type.Object({ name: Type.String({ minLength: 1, maxLength: 100, pattern: '^\\S(.*\\S)?$' }), tokenName: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) }, strict)
const UserPatch = Type.Object({ disabled: Type.Boolean() }, strict)
const TokenCreate = Type.Object({ name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) }, strict)
const conflict = { 409: Type.Ref('Problem') }

/**
 * Operator routes behind `PLINTH_ADMIN_TOKEN`. Routes that issue a token secret do not honour
 * Idempotency-Key: replaying would mean storing the secret.
 */
const Settings = Type.Object({
  execBackend: Type.Union([Type.Literal('direct'), Type.Literal('sandbox')]),
  sandbox: Type.Object({
    ok: Type.Boolean(),
    reason: Type.Union([Type.String(), Type.Null()]),
    cgroups: Type.String(),
    user: Type.Union([Type.String(), Type.Null()]),
    bwrapVersion: Type.Union([Type.String(), Type.Null()]),
  }),
}, { title: 'Settings' })
const SettingsPatch = Type.Object({ execBackend: Type.Optional(Type.Union([Type.Literal('direct'), Type.Literal('sandbox')])) }, strict)

export function registerAdminRoutes(app: App, deps: ServerDeps): void {
  const { store } = deps
  const settingsView = () => ({ execBackend: deps.exec.backendName, sandbox: deps.exec.probe })

  app.get('/settings', { schema: { operationId: 'getSettings', tags, summary: 'Operator settings that change at run time, and the sandbox probe', response: { 200: Settings, ...problemResponses } } }, async () =>
    settingsView(),
  )

  app.patch(
    '/settings',
    {
      schema: {
        operationId: 'updateSettings',
        tags,
        summary: 'Change run-time settings (audited). execBackend applies to the next execution on every instance; switching to sandbox runs the probe first (409 sandbox_unavailable if it fails)',
        body: SettingsPatch,
        response: { 200: Settings, ...problemResponses, ...conflict },
      },
    },
    async (request) => {
      const wanted = request.body.execBackend
      if (wanted !== undefined && wanted !== deps.exec.backendName) {
        const changed = await deps.exec.setBackend(wanted, 'admin')
        if (!changed.ok) throw new HttpProblem('sandbox_unavailable', changed.reason, { probe: deps.exec.probe })
      }
      return settingsView()
    },
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
      const issued = await store.transaction(async (tx) => {
        const user = await createUser(tx, request.body.name)
        if ('error' in user) throw new HttpProblem('name_taken', `a user named ${JSON.stringify(request.body.name)} exists`)
        return { user, token: await createToken(tx, user.id, request.body.tokenName ?? 'default') }
      })
      request.log.info({ userId: issued.user.id }, 'user created')
      return reply.code(201).send(issued)
    },
  )

  app.get('/users', { schema: { operationId: 'listUsers', tags, summary: 'Users', querystring: PageQuery, response: { 200: PageOf(User), ...problemResponses } } }, async (request) =>
    toListAnswer(await listUsers(store.db, { limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) }), (user) => user),
  )

  app.get('/users/:id', { schema: { operationId: 'getUser', tags, summary: 'A user', params: IdParams, response: { 200: User, ...problemResponses } } }, async (request) => {
    const user = await getUser(store.db, request.params.id)
    if (!user) throw notFound('user')
    return user
  })

  app.patch(
    '/users/:id',
    { schema: { operationId: 'updateUser', tags, summary: 'Disable or re-enable a user (disabled users cannot authenticate)', params: IdParams, body: UserPatch, response: { 200: User, ...problemResponses } } },
    async (request) => {
      const echoed = request.body.disabled ? store.access.echo(`user:${request.params.id}`) : undefined
      const user = await setUserDisabled(store.db, request.params.id, request.body.disabled)
      if (!user) throw notFound('user')
      // Here at once; the answer waits until every instance has been sent the notification, so the
      // user's cached tokens stop working on their next request wherever it goes.
      if (echoed) {
        store.access.deliver(`user:${user.id}`)
        await echoed()
      }
      return user
    },
  )

  app.post(
    '/users/:id/tokens',
    { schema: { operationId: 'createUserToken', tags, summary: 'Issue a token (the secret is shown once)', params: IdParams, body: TokenCreate, response: { 201: IssuedToken, ...problemResponses } } },
    async (request, reply) => {
      const user = await getUser(store.db, request.params.id)
      if (!user) throw notFound('user')
      return reply.code(201).send(await createToken(store.db, user.id, request.body.name ?? 'default'))
    },
  )

  app.get(
    '/users/:id/tokens',
    { schema: { operationId: 'listUserTokens', tags, summary: "A user's tokens (no secrets)", params: IdParams, querystring: PageQuery, response: { 200: PageOf(ApiToken), ...problemResponses } } },
    async (request) => {
      const user = await getUser(store.db, request.params.id)
      if (!user) throw notFound('user')
      return toListAnswer(await listTokens(store.db, user.id, { limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) }), (token) => token)
    },
  )

  app.delete(
    '/tokens/:id',
    { schema: { operationId: 'revokeToken', tags, summary: 'Revoke a token; it stops working on the next request', params: IdParams, response: { 204: Type.Null(), ...problemResponses } } },
    async (request, reply) => {
      if (!(await getToken(store.db, request.params.id))) throw notFound('token')
      const echoed = store.access.echo(`token:${request.params.id}`)
      await revokeToken(store.db, request.params.id)
      store.access.deliver(`token:${request.params.id}`)
      await echoed()
      return reply.code(204).send(null)
    },
  )
}
