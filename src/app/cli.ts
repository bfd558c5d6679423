import { parseArgs } from 'node:util'
import { processIo, type Io } from './cli-io.js'
import { version } from './version.js'

// Kept light: each command loads what it needs when it runs (`--version`, `--help` and the client
// commands load no database, server or plugin code).

const usage = `plinth ${version} — headless HTTP + SSE agent server

Usage:
  plinth [serve] [--strict-plugins]    start the server (config: env + plinth.config.json);
                                       --strict-plugins: a plugin that cannot load stops it
  plinth migrate                       apply pending database migrations
  plinth users create <name> [--json] [--token-name N]
                                       create a user; the token is the last line of output
  plinth users list [--json]
  plinth users disable|enable <user>   <user> is an id or a name
  plinth tokens create <user> [--name N] [--json]
  plinth tokens list <user> [--json]
  plinth tokens revoke <token-id>
  plinth audit verify                  check the audit log's hash chain (exit 1 naming the first bad entry);
                                       beside a running server (PLINTH_ADMIN_TOKEN) through its admin API
  plinth knowledge reembed             re-embed all knowledge with the configured embedder (after changing it)
  plinth chat [--url U] [--token T] [--project ID] [--conversation ID] [--model M] [--once "question"]
                                       a terminal client of a running server (PLINTH_URL, PLINTH_TOKEN);
                                       proposed commands run here after you approve them;
                                       --model: a configured model id for the runs (GET /api/models)
                                       (--command-timeout seconds, default 60; output capped at 64 KiB)
  plinth mcp [--url U] [--token T] [--project ID]
                                       an MCP server on stdin/stdout for desktop MCP clients, forwarding
                                       to a running server's /mcp (PLINTH_URL, PLINTH_TOKEN; default URL
                                       http://127.0.0.1:$PORT, 8080); --project: that project's tools only
  plinth help | --version (-v)
`

/** Runs one CLI invocation; resolves to the exit code (serve resolves only on failure). */
export async function runCli(argv: string[], io: Io = processIo): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        json: { type: 'boolean', default: false },
        name: { type: 'string' },
        'token-name': { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
        version: { type: 'boolean', short: 'v', default: false },
        'strict-plugins': { type: 'boolean', default: false },
        url: { type: 'string' },
        token: { type: 'string' },
        project: { type: 'string' },
        conversation: { type: 'string' },
        once: { type: 'string' },
        model: { type: 'string' },
        'command-timeout': { type: 'string' },
      },
    })
  } catch (error) {
    io.err(`${(error as Error).message}\n\n${usage}`)
    return 2
  }
  const { values, positionals } = parsed
  if (values.version) {
    io.out(version)
    return 0
  }
  const [command = 'serve', sub, arg] = positionals
  if (values.help || command === 'help') {
    io.out(usage)
    return 0
  }
  // A client: it needs no server configuration (nor a database).
  if (command === 'chat') return chat(values, io)
  if (command === 'mcp') return mcp(values, io)
  try {
    const { loadConfig } = await import('./config.js')
    const config = loadConfig()
    if (values['strict-plugins']) config.strictPlugins = true
    switch (command) {
      case 'serve':
        return await (await import('./cli-server-commands.js')).serve(config, io)
      case 'migrate': {
        const { withStore } = await import('./cli-server-commands.js')
        return await withStore(config, async (store) => {
          const applied = store.migrations.applied
          io.out(applied.length > 0 ? `applied ${applied.join(', ')}` : 'database is up to date')
          return 0
        })
      }
      case 'users':
        return await (await import('./cli-admin-commands.js')).usersCommand(config, sub, arg, values, io, () => usage)
      case 'tokens':
        return await (await import('./cli-admin-commands.js')).tokensCommand(config, sub, arg, values, io, () => usage)
      case 'audit':
        if (sub !== 'verify') {
          io.err(usage)
          return 2
        }
        return await (await import('./cli-admin-commands.js')).auditVerifyCommand(config, io)
      case 'knowledge': {
        if (sub !== 'reembed') {
          io.err(usage)
          return 2
        }
        const { reembed, withStore } = await import('./cli-server-commands.js')
        return await withStore(config, (store) => reembed(store, config, io))
      }
      default:
        io.err(`unknown command: ${command}\n\n${usage}`)
        return 2
    }
  } catch (error) {
    // Configuration problems are usage errors (exit 2); the rest, database ones included, exit 1.
    if ((error as Error).name === 'ConfigError') {
      io.err((error as Error).message)
      return 2
    }
    io.err(`plinth: ${(error as Error).message}`)
    return 1
  }
}

/** `plinth mcp`: stdout carries JSON-RPC only, so everything else goes to stderr. */
async function mcp(values: { url?: string; token?: string; project?: string }, io: Io): Promise<number> {
  const token = values.token ?? process.env.PLINTH_TOKEN
  if (!token) {
    io.err('plinth mcp needs a token: --token or PLINTH_TOKEN (plinth users create <name> prints one)')
    return 2
  }
  const url = values.url ?? process.env.PLINTH_URL ?? `http://127.0.0.1:${process.env.PORT ?? 8080}`
  const { runMcpProxy } = await import('./mcp-proxy.js')
  return runMcpProxy({ url, token, ...(values.project && { project: values.project }), log: (line) => io.err(line) })
}

async function chat(
  values: {
    url?: string
    token?: string
    project?: string
    conversation?: string
    model?: string
    once?: string
    'command-timeout'?: string
  },
  io: Io,
): Promise<number> {
  const token = values.token ?? process.env.PLINTH_TOKEN
  if (!token) {
    io.err('plinth chat needs a token: --token or PLINTH_TOKEN (plinth users create <name> prints one)')
    return 2
  }
  const timeout = Number(values['command-timeout'] ?? 60)
  if (!Number.isFinite(timeout) || timeout <= 0) {
    io.err('--command-timeout must be a positive number of seconds')
    return 2
  }
  const { ChatSession } = await import('../chat/index.js')
  const session = new ChatSession({
    url: values.url ?? process.env.PLINTH_URL ?? `http://127.0.0.1:${process.env.PORT ?? 8080}`,
    token,
    ...(values.project && { project: values.project }),
    ...(values.conversation && { conversation: values.conversation }),
    ...(values.model && { model: values.model }),
    ...(values.once !== undefined && { once: values.once }),
    commandTimeoutMs: timeout * 1000,
    outputMaxBytes: 64 * 1024,
    input: process.stdin,
    output: process.stdout,
    errorOutput: process.stderr,
  })
  return session.run()
}
