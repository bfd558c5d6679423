// An MCP server written with the official SDK, for the MCP client tests: tools with annotations, an
// error result, a slow tool that records its cancellation, a crash mid-call, a list that grows, a big
// result, an image, and a tool that breaks its own output schema. Over stdio, or Streamable HTTP when
// started with `http <port>`. TOY_LOG names a file it appends what happened to; TOY_HANG=1 never
// answers `initialize`; TOY_COLLIDE=1 adds two tools whose names collide once mapped; TOY_GARBAGE=1
// writes lines that are not JSON-RPC to stdout before and between its answers. `oauth <port>` serves
// Streamable HTTP behind OAuth 2.1: an authorization server built with the SDK's server-side helpers
// (dynamic registration, PKCE; it approves at once, as if the user clicked "allow") on the same port.
// TOY_FILES=1 adds `write_file` (writes into its working directory) and `inspect` (its cwd and uid, which
// paths it can read, whether it can open a TCP connection): what the sandbox tests look at.
import { appendFileSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { connect } from 'node:net'
import { join } from 'node:path'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'

const log = (line) => process.env.TOY_LOG && appendFileSync(process.env.TOY_LOG, `${line}\n`)
log(`start ${process.pid}`)

if (process.env.TOY_HANG === '1') {
  // Reads and ignores everything: `initialize` is never answered.
  process.stdin.resume()
  setInterval(() => {}, 1 << 30)
} else {
  const pixel = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=='
  const object = (properties, required = []) => ({ type: 'object', properties, required })
  let grown = false
  const tools = () => [
    { name: 'echo', title: 'Echo', description: 'Says the text back', inputSchema: object({ text: { type: 'string' } }, ['text']), annotations: { readOnlyHint: true, openWorldHint: false } },
    { name: 'delete-thing', description: 'Deletes a thing for good', inputSchema: object({ name: { type: 'string' } }, ['name']), annotations: { destructiveHint: true, openWorldHint: true } },
    { name: 'fail', description: 'Always reports an error', inputSchema: object({}) },
    { name: 'slow', description: 'Waits ms milliseconds', inputSchema: object({ ms: { type: 'integer' } }, ['ms']), annotations: { readOnlyHint: true } },
    { name: 'crash', description: 'Exits mid-call', inputSchema: object({}) },
    { name: 'grow', description: 'Adds the tool "extra"', inputSchema: object({}) },
    { name: 'big', description: 'Returns bytes of text', inputSchema: object({ bytes: { type: 'integer' } }, ['bytes']), annotations: { readOnlyHint: true } },
    { name: 'image', description: 'Returns a picture', inputSchema: object({}), annotations: { readOnlyHint: true } },
    { name: 'liar', description: 'Breaks its output schema', inputSchema: object({}), outputSchema: object({ n: { type: 'number' } }, ['n']) },
    { name: 'Bad Schema', description: 'Its input schema is not an object', inputSchema: { type: 'string' } },
    ...(grown ? [{ name: 'extra', description: 'Appeared later', inputSchema: object({}), annotations: { readOnlyHint: true } }] : []),
    ...(process.env.TOY_FILES === '1'
      ? [
          { name: 'write_file', description: 'Writes a file into the working directory', inputSchema: object({ name: { type: 'string' }, text: { type: 'string' } }, ['name', 'text']) },
          {
            name: 'inspect',
            description: 'Where it runs and what it can reach',
            inputSchema: object({ paths: { type: 'array', items: { type: 'string' } }, host: { type: 'string' }, port: { type: 'integer' } }),
            annotations: { readOnlyHint: true },
          },
        ]
      : []),
    ...(process.env.TOY_COLLIDE === '1' ? [{ name: 'get-env', description: 'a', inputSchema: object({}) }, { name: 'get_env', description: 'b', inputSchema: object({}) }] : []),
  ]
  const text = (value) => ({ content: [{ type: 'text', text: value }] })
  const make = () => {
    const server = new Server({ name: 'toy-server', version: '1.2.3' }, { capabilities: { tools: { listChanged: true } } })
    server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: tools() }))
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      const args = request.params.arguments ?? {}
      log(`call ${request.params.name} ${JSON.stringify(args)}`)
      switch (request.params.name) {
        case 'echo':
          return { ...text(`echo: ${args.text}`), structuredContent: { text: args.text } }
        case 'delete-thing':
          return text(`deleted ${args.name}`)
        case 'fail':
          return { ...text('the widget is broken'), isError: true }
        case 'slow':
          return await new Promise((resolve) => {
            const timer = setTimeout(() => resolve(text('done')), args.ms)
            extra.signal.addEventListener('abort', () => {
              clearTimeout(timer)
              log(`cancelled ${extra.requestId}`)
              resolve(text('cancelled'))
            })
          })
        case 'crash':
          log('crashing')
          process.exit(3)
          break
        case 'grow':
          grown = true
          await server.sendToolListChanged()
          return text('grown')
        case 'big':
          return text('x'.repeat(args.bytes))
        case 'image':
          return { content: [{ type: 'text', text: 'a pixel' }, { type: 'image', data: pixel, mimeType: 'image/png' }] }
        case 'liar':
          return { ...text('n is a string'), structuredContent: { n: 'not a number' } }
        case 'extra':
          return text('extra here')
        case 'write_file':
          writeFileSync(join(process.cwd(), args.name), args.text)
          return { ...text(`wrote ${args.name}`), structuredContent: { cwd: process.cwd() } }
        case 'inspect': {
          // A path counts as readable when it can be listed (a directory) or stat-ed and read (a file).
          const readable = {}
          for (const path of args.paths ?? []) {
            try {
              if (statSync(path).isDirectory()) readdirSync(path)
              else readFileSync(path)
              readable[path] = true
            } catch {
              readable[path] = false
            }
          }
          let connected = null
          if (args.port) {
            connected = await new Promise((resolve) => {
              const socket = connect({ host: args.host ?? '127.0.0.1', port: args.port })
              const done = (value) => {
                socket.destroy()
                resolve(value)
              }
              socket.once('connect', () => done(true))
              socket.once('error', () => done(false))
              socket.setTimeout(2000, () => done(false))
            })
          }
          const result = { cwd: process.cwd(), uid: process.getuid(), home: process.env.HOME ?? null, readable, connected }
          return { ...text(JSON.stringify(result)), structuredContent: result }
        }
        default:
          return { ...text(`no tool ${request.params.name}`), isError: true }
      }
    })
    return server
  }

  if (process.argv[2] === 'oauth') {
    const { default: express } = await import('express')
    const { mcpAuthRouter, getOAuthProtectedResourceMetadataUrl } = await import('@modelcontextprotocol/sdk/server/auth/router.js')
    const { requireBearerAuth } = await import('@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js')
    const { DemoInMemoryAuthProvider } = await import('@modelcontextprotocol/sdk/examples/server/demoInMemoryOAuthProvider.js')
    const { InvalidTokenError } = await import('@modelcontextprotocol/sdk/server/auth/errors.js')
    const port = Number(process.argv[3])
    const base = new URL(`http://127.0.0.1:${port}/`)
    const mcpUrl = new URL('/mcp', base)
    const provider = new DemoInMemoryAuthProvider()
    const app = express()
    app.use(express.json())
    app.use(mcpAuthRouter({ provider, issuerUrl: base, resourceServerUrl: mcpUrl, scopesSupported: ['tools'] }))
    // Revokes every token at once, as a user who disconnects the app on the provider's side.
    app.post('/revoke-all', (_req, res) => {
      provider.tokens.clear()
      res.json({ ok: true })
    })
    // An unknown or revoked token is a 401 with WWW-Authenticate, as a real resource server answers.
    const verifier = {
      verifyAccessToken: async (token) => {
        try {
          return await provider.verifyAccessToken(token)
        } catch {
          throw new InvalidTokenError('invalid or expired token')
        }
      },
    }
    app.post('/mcp', requireBearerAuth({ verifier, resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(mcpUrl) }), async (req, res) => {
      log(`bearer ${req.auth?.clientId}`)
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
      const server = make()
      res.on('close', () => {
        void transport.close()
        void server.close()
      })
      await server.connect(transport)
      await transport.handleRequest(req, res, req.body)
    })
    app.listen(port, '127.0.0.1', () => process.stdout.write(`listening ${port}\n`))
  } else if (process.argv[2] === 'http') {
    // Stateless Streamable HTTP: a server and transport per request. Requires the bearer in TOY_TOKEN.
    const http = createServer(async (req, res) => {
      if (process.env.TOY_TOKEN && req.headers.authorization !== `Bearer ${process.env.TOY_TOKEN}`) {
        res.writeHead(401).end()
        return
      }
      const chunks = []
      for await (const chunk of req) chunks.push(chunk)
      const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
      const server = make()
      res.on('close', () => {
        void transport.close()
        void server.close()
      })
      await server.connect(transport)
      await transport.handleRequest(req, res, body)
    })
    http.listen(Number(process.argv[3] ?? 0), '127.0.0.1', () => {
      process.stdout.write(`listening ${http.address().port}\n`)
    })
  } else {
    if (process.env.TOY_GARBAGE === '1') {
      process.stdout.write('this is not JSON\n{"jsonrpc":"2.0","method":42}\n')
      setInterval(() => process.stdout.write('{"half": \n'), 200).unref()
    }
    await make().connect(new StdioServerTransport())
  }
}
