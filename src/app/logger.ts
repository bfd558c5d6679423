import type { IncomingMessage } from 'node:http'
import { pino, stdSerializers, type Logger, type LoggerOptions } from 'pino'
import type { McpServerConfig } from '../mcp/index.js'
import type { PlinthConfig } from './config.js'

/** Paths pino blanks out wherever they appear in a log line: secrets never reach logs. */
export const redactPaths = [
  'req.headers.authorization',
  'req.headers["idempotency-key"]',
  'headers.authorization',
  '*.token',
  '*.apiKey',
  '*.adminToken',
  '*.metricsToken',
  '*.password',
  'token',
  'adminToken',
]

/** Query parameters whose values are credentials wherever they appear in a URL. */
const secretParam =
  /^(access_?token|token|ticket|api_?key|key|secret|password|passwd|auth|authorization|signature|sig|code)$/i

/** Credential shapes scrubbed from every line, whatever field they hide in. */
const secretShapes: Array<[RegExp, string]> = [
  [/\b(plt|pst)_[A-Za-z0-9_-]{8,}/g, '$1_[redacted]'],
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi, '$1 [redacted]'],
  [/\bsk-(ant-)?[A-Za-z0-9_-]{8,}/g, 'sk-[redacted]'],
  [/(postgres(?:ql)?:\/\/[^:/\s"]*:)[^@\s"]+@/gi, '$1[redacted]@'],
  // Any other URL's password, and credential query parameters: error messages and stacks quote URLs.
  [/(\b[a-z][a-z0-9+.-]*:\/\/[^:/\s"@]*:)[^@\s"/]+@/gi, '$1[redacted]@'],
  [
    /([?&](?:access_?token|token|ticket|api_?key|key|secret|password|passwd|auth|authorization|signature|sig|code)=)(?!\[redacted\])[^&\s"#\\]+/gi,
    '$1[redacted]',
  ],
]

/** A URL as logged: query parameters that carry credentials are blanked. */
export function redactUrl(url: string): string {
  const query = url.indexOf('?')
  if (query < 0) return url
  const params = url
    .slice(query + 1)
    .split('&')
    .map((pair) => {
      const name = pair.split('=', 1)[0] ?? ''
      let decoded = name
      try {
        decoded = decodeURIComponent(name)
      } catch {
        // keep the raw name
      }
      return secretParam.test(decoded) ? `${name}=[redacted]` : pair
    })
  return `${url.slice(0, query)}?${params.join('&')}`
}

/** What Fastify's listen is told to log (see listenTextResolver); the logger drops it. */
export const fastifyListeningText = 'fastify listening'

/** MCP servers' credentials: from the environment (headersEnv, envFrom) and plain headers. */
export function mcpServerSecrets(
  servers: ReadonlyArray<Pick<McpServerConfig, 'headersEnv' | 'envFrom' | 'headers'>>,
  env: NodeJS.ProcessEnv = process.env,
): string[] {
  return servers
    .flatMap((server) => [
      ...Object.values(server.headersEnv ?? {}).map((name) => env[name]),
      ...Object.values(server.envFrom ?? {}).map((name) => env[name]),
      ...Object.values(server.headers ?? {}),
    ])
    .filter((secret): secret is string => typeof secret === 'string' && secret.length >= 8)
}

/** The secrets of a configuration, scrubbed literally from every log line. */
export function configSecrets(
  config: Pick<PlinthConfig, 'adminToken' | 'metricsToken' | 'models'> &
    Partial<Pick<PlinthConfig, 'mcpServers' | 'secretKey'>>,
  env: NodeJS.ProcessEnv = process.env,
): string[] {
  const secrets = [
    config.adminToken,
    config.metricsToken,
    config.secretKey,
    ...mcpServerSecrets(config.mcpServers ?? [], env),
    ...config.models.map((model) => (model.apiKeyEnv ? env[model.apiKeyEnv] : undefined)),
    // Extra upstream headers may carry a gateway's credentials.
    ...config.models.flatMap((model) => Object.values(model.headers ?? {})),
  ]
  return secrets.filter((secret): secret is string => typeof secret === 'string' && secret.length >= 8)
}

/**
 * The server's logger: structured JSON, with credentials removed three ways — known fields by path,
 * URLs without their credential parameters, and every finished line scrubbed of token shapes and of
 * the configured secrets. Errors go in `err` (message, stack, causes; scrubbed like the rest of the line),
 * without `rawPacket` (the client's raw request bytes).
 */
export function createLogger(
  level: string,
  destination?: NodeJS.WritableStream,
  secrets: readonly string[] = [],
): Logger {
  const literal = secrets.filter((secret) => secret.length >= 8)
  const logger = pino(options(level, literal), destination ?? process.stdout)
  literalSecrets.set(logger, literal)
  return logger
}

/** Each logger's literal secrets: more are added once plugins have declared theirs (`scrubAlso`). */
const literalSecrets = new WeakMap<Logger, string[]>()

/** Scrubs these values from every later line of `logger` (made by `createLogger`) and its children. */
export function scrubAlso(logger: Logger, secrets: readonly string[]): void {
  const literal = literalSecrets.get(logger)
  if (!literal) return
  for (const secret of secrets) if (secret.length >= 8 && !literal.includes(secret)) literal.push(secret)
}

/** Scrubs text the way `logger`'s lines are: credential shapes and its literal secrets (trace spans use it). */
export function scrubberOf(logger: Logger): (text: string) => string {
  return scrubber(literalSecrets.get(logger) ?? [])
}

function scrubber(literal: readonly string[]): (text: string) => string {
  return (line) => {
    let out = line
    for (const [shape, replacement] of secretShapes) out = out.replace(shape, replacement)
    for (const secret of literal) if (out.includes(secret)) out = out.split(secret).join('[redacted]')
    return out
  }
}

function options(level: string, literal: readonly string[]): LoggerOptions {
  const scrub = scrubber(literal)
  return {
    level,
    redact: { paths: redactPaths, censor: '[redacted]' },
    serializers: {
      req: (request: IncomingMessage & { ip?: string }) => ({
        method: request.method,
        url: redactUrl(request.url ?? ''),
        remoteAddress: request.ip ?? request.socket?.remoteAddress,
        remotePort: request.socket?.remotePort,
      }),
      err: (error: Error) => {
        const serialized = stdSerializers.err(error) as Record<string, unknown>
        delete serialized.rawPacket
        return serialized
      },
    },
    hooks: {
      streamWrite: scrub,
      // Fastify's own "Server listening at" lines (one per interface): Plinth logs one line of its own.
      logMethod(args, method) {
        if (args[0] === fastifyListeningText) return
        method.apply(this, args)
      },
    },
  }
}
