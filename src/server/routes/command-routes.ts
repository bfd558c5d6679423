import { Type } from 'typebox'
import { alwaysAsks, catalogRisk, commandIdPattern, parseSlash } from '../../cmdbus/index.js'
import type { JsonValue } from '../../extension/index.js'
import { caller } from '../auth.js'
import { sendDispatchOutcome } from '../dispatch-answer.js'
import { idempotencyKey } from '../idempotency.js'
import { decodeKeyCursor, encodeKeyCursor } from '../cursor.js'
import { HttpProblem } from '../problem.js'
import { Decision, Id, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['commands']
const problem = Type.Ref('Problem')
const RiskLevel = Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high')])

const CommandView = Type.Object(
  {
    id: Type.String(),
    title: Type.String(),
    description: Type.String(),
    paramsSchema: Type.Record(Type.String(), Type.Unknown(), { description: 'The JSON Schema of its params' }),
    risk: Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high'), Type.Literal('varies')], {
      description:
        'The command’s risk level, or `varies` when a classifier decides it per call (each call is shown its evaluated level)',
    }),
    riskRange: Type.Union([Type.Object({ min: RiskLevel, max: RiskLevel }), Type.Null()], {
      description: 'With `varies`: the lowest and highest level a call can get; otherwise null',
    }),
    confirm: Type.Boolean(),
    entrances: Type.Array(Type.String()),
    exposeAsTool: Type.Union([
      Type.Object({ name: Type.String(), risk: Type.Union([Type.String(), Type.Null()]) }),
      Type.Null(),
    ]),
    idempotent: Type.Boolean(),
    plugin: Type.String(),
    origin: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], {
      description:
        'A mounted command’s source, or null: for an MCP tool `{type: "mcp", server, serverName, serverVersion, tool (the remote name), openWorldHint}`',
    }),
  },
  { title: 'Command' },
)

const DispatchBody = Type.Object(
  {
    entrance: Type.Union([
      Type.Literal('button'),
      Type.Literal('card'),
      Type.Literal('slash'),
      Type.Literal('chat'),
      Type.Literal('agent'),
    ]),
    params: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    text: Type.Optional(
      Type.String({ maxLength: 20_000, description: 'Slash text, e.g. /rdm.ping target=x "two words"' }),
    ),
    conversationId: Type.Optional(Id),
    projectId: Type.Optional(Id),
  },
  { additionalProperties: false },
)

const DispatchAnswer = Type.Object({
  dispatchId: Type.String(),
  status: Type.Union([Type.Literal('succeeded'), Type.Literal('awaiting_decision')]),
  result: Type.Optional(Type.Unknown({ description: 'The command’s result (200)' })),
  decision: Type.Optional(Decision),
})

// A command without an `entrances` list may be dispatched from every entrance, `mcp` included.
const allEntrances = ['button', 'card', 'slash', 'chat', 'agent', 'mcp', 'schedule']

export function registerCommandRoutes(app: App, deps: ServerDeps): void {
  const { bus } = deps

  app.get(
    '/commands',
    {
      schema: {
        operationId: 'listCommands',
        tags,
        summary: 'The command catalog, by id',
        querystring: Type.Object(
          {
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 200 })),
            cursor: Type.Optional(Type.String({ maxLength: 400 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ items: Type.Array(CommandView), nextCursor: Type.Union([Type.String(), Type.Null()]) }),
          ...problemResponses,
        },
      },
    },
    async (request) => {
      const after = decodeKeyCursor(request.query.cursor)
      const limit = request.query.limit ?? 200
      await bus.catalog.settled()
      const commands = bus.catalog
        .list()
        .filter((command) => after === undefined || command.spec.id > after)
        .sort((a, b) => (a.spec.id < b.spec.id ? -1 : a.spec.id > b.spec.id ? 1 : 0))
      const page = commands.slice(0, limit)
      return {
        nextCursor: commands.length > limit ? encodeKeyCursor(page.at(-1)!.spec.id) : null,
        items: page.map((command) => ({
          id: command.spec.id,
          title: command.spec.title,
          description: command.spec.description,
          paramsSchema: command.spec.paramsSchema,
          ...catalogRisk(command),
          // Whether every call asks now (the exec commands do under the direct backend).
          confirm: alwaysAsks(command, {}),
          entrances: command.spec.entrances ?? allEntrances,
          exposeAsTool: command.toolName
            ? { name: command.toolName, risk: command.spec.exposeAsTool?.risk ?? null }
            : null,
          idempotent: command.spec.idempotent === true,
          plugin: command.plugin,
          origin: command.origin ?? null,
        })),
      }
    },
  )

  app.post(
    '/commands/:commandId',
    {
      schema: {
        operationId: 'dispatchCommand',
        tags,
        summary: 'Dispatch a command from a human entrance: 200 with the result, or 202 with the pending decision',
        params: Type.Object(
          { commandId: Type.String({ maxLength: 200, pattern: commandIdPattern.source }) },
          { additionalProperties: false },
        ),
        body: DispatchBody,
        response: {
          200: DispatchAnswer,
          202: DispatchAnswer,
          ...problemResponses,
          409: problem,
          422: problem,
          502: problem,
          504: problem,
        },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const { commandId } = request.params
      const body = request.body
      if (body.entrance === 'agent') {
        throw new HttpProblem(
          'entrance_not_allowed',
          'the agent entrance is for the model’s own tool calls; use button, card, slash or chat',
        )
      }
      // Mounted MCP servers start when the catalog is first needed: a dispatch may be that first need.
      await bus.catalog.settled()
      const command = bus.catalog.get(commandId)
      if (!command) throw new HttpProblem('unknown_command', `no command ${commandId}`)
      if (body.params !== undefined && body.text !== undefined)
        throw new HttpProblem('validation_failed', 'body: give params or text, not both', {
          errors: [{ path: 'body.text', message: 'must not be given with params' }],
        })
      let params = (body.params ?? {}) as { [key: string]: JsonValue }
      if (body.text !== undefined) {
        const parsed = parseSlash(body.text, command.spec.paramsSchema)
        if (!parsed.ok) throw new HttpProblem('invalid_slash_command', parsed.message)
        if (parsed.commandId !== null && parsed.commandId !== commandId) {
          throw new HttpProblem(
            'invalid_slash_command',
            `the text names /${parsed.commandId} but the route is ${commandId}`,
          )
        }
        params = parsed.params
      }
      const key = idempotencyKey(request)
      const outcome = await bus.dispatch({
        commandId,
        params,
        entrance: body.entrance,
        actor: { type: 'user', id: user.id, onBehalfOf: user.id },
        projectId: body.projectId ?? null,
        conversationId: body.conversationId ?? null,
        idempotencyKey: key ?? null,
      })
      return sendDispatchOutcome(reply, outcome)
    },
  )
}
