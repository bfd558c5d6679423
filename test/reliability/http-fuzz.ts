import fc from 'fast-check'
import { problemCatalogue } from '../../src/server/problem.js'

/** What the fuzzer may use: the server, tokens of different standing, ids that exist. */
export interface FuzzTarget {
  url: string
  /** `member`: a user the owner's project is shared with. */
  tokens: { owner: string; other: string; member: string; revoked: string }
  ids: string[]
  /** Ids a caller other than the owner must never be shown (unless they sent them): per caller. */
  privateIds: { stranger: string[]; member: string[] }
}

export interface FuzzReport {
  seed: number
  requests: number
  routes: number
  byStatus: Record<string, number>
  failures: string[]
}

interface Operation {
  method: string
  path: string
  params: Array<{ name: string; in: string }>
  hasBody: boolean
  stream: boolean
}

/** The operations the server documents under /api (admin ones too: they must refuse user tokens cleanly). */
export async function documentedOperations(url: string): Promise<Operation[]> {
  const document = (await (await fetch(`${url}/docs/json`)).json()) as {
    paths: Record<
      string,
      Record<
        string,
        {
          parameters?: Array<{ name: string; in: string }>
          requestBody?: unknown
          responses?: Record<string, { content?: Record<string, unknown> }>
        }
      >
    >
  }
  const operations: Operation[] = []
  for (const [path, methods] of Object.entries(document.paths)) {
    if (!path.startsWith('/api/')) continue
    for (const [method, operation] of Object.entries(methods)) {
      const stream = Object.values(operation.responses ?? {}).some(
        (response) => response.content && 'text/event-stream' in response.content,
      )
      operations.push({
        method: method.toUpperCase(),
        path,
        params: operation.parameters ?? [],
        hasBody: operation.requestBody !== undefined,
        stream,
      })
    }
  }
  return operations
}

const knownCodes = new Set(Object.keys(problemCatalogue))
/** Commands the fuzzer may name: never the exec ones (a random command line must not run here). */
const commandIds = [
  'rdm.ping',
  'rdm.trace',
  'core.list_projects',
  'core.knowledge_search',
  'no.such.command',
  'core.exec.',
  'BAD id',
]

/** Strings meant to break parsers and validators. */
const hostileString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom(
    '',
    ' ',
    '\u0000',
    'a\u0000b',
    '\ud800',
    '../../etc/passwd',
    '%00',
    '%',
    '%zz',
    '<script>',
    "' or 1=1 --",
    '🚀'.repeat(30),
    'x'.repeat(5000),
    '-1',
    '1e309',
    'NaN',
    'null',
    '[]',
    '{}',
  ),
)

const jsonish: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.dictionary(
    fc.constantFrom(
      'name',
      'input',
      'title',
      'text',
      'params',
      'entrance',
      'decision',
      'path',
      'permissionMode',
      'outputs',
      'items',
      'model',
      'ifActive',
      'clientTools',
      'disabled',
      'query',
      'k',
    ),
    fc.jsonValue({ maxDepth: 2 }),
    { maxKeys: 5 },
  ),
  fc.constant({ name: 'ok' }),
  fc.constant({ input: 'hi' }),
)

/** A path segment as a client would send it (a lone surrogate cannot be percent-encoded: it becomes U+FFFD). */
function encodePathValue(value: string): string {
  return encodeURIComponent(
    value.replace(/[\ud800-\udfff]/g, (char, offset: number, whole: string) =>
      /[\ud800-\udbff][\udc00-\udfff]/.test(whole.slice(offset, offset + 2)) ||
      /[\ud800-\udbff][\udc00-\udfff]/.test(whole.slice(offset - 1, offset + 1))
        ? char
        : '\ufffd',
    ),
  )
}

function deepJson(depth: number): string {
  return '['.repeat(depth) + ']'.repeat(depth)
}

const bodies = fc.oneof(
  {
    weight: 6,
    arbitrary: jsonish.map((value) => ({ type: 'application/json', text: JSON.stringify(value) ?? 'null' })),
  },
  { weight: 1, arbitrary: fc.constant({ type: 'application/json', text: deepJson(5000) }) },
  { weight: 1, arbitrary: fc.constant({ type: 'application/json', text: '{"a":1,"a":2,"name":"dup"}' }) },
  { weight: 1, arbitrary: hostileString.map((text) => ({ type: 'application/json', text })) },
  { weight: 1, arbitrary: fc.constant({ type: 'text/plain', text: 'hello' }) },
  { weight: 1, arbitrary: fc.constant({ type: 'application/json', text: `{"name":"${'y'.repeat(70_000)}"}` }) },
  { weight: 1, arbitrary: fc.constant({ type: '', text: '{"name":"x"}' }) },
)

/**
 * Sends `count` generated requests (seeded) at every documented /api operation and checks each answer:
 * never a 5xx other than documented command failures, every error problem+json with a known code and
 * no stack trace or SQL, streams answered as streams, and the server still answering at the end.
 */
export async function fuzzHttp(target: FuzzTarget, options: { count: number; seed: number }): Promise<FuzzReport> {
  const operations = await documentedOperations(target.url)
  const report: FuzzReport = { seed: options.seed, requests: 0, routes: operations.length, byStatus: {}, failures: [] }
  const idValue = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...target.ids) },
    { weight: 1, arbitrary: hostileString },
    { weight: 1, arbitrary: fc.constant('01ARZ3NDEKTSV4RRFFQ69G5FAV') },
  )
  const request = fc.record({
    operation: fc.constantFrom(...operations),
    auth: fc.constantFrom('owner', 'owner', 'owner', 'other', 'member', 'revoked', 'none', 'garbage'),
    pathValues: fc.array(idValue, { minLength: 3, maxLength: 3 }),
    commandId: fc.constantFrom(...commandIds),
    query: fc.dictionary(
      fc.constantFrom('limit', 'cursor', 'status', 'after', 'q', 'k', 'wait', 'mode', 'commandId', 'x'),
      hostileString,
      { maxKeys: 3 },
    ),
    body: bodies,
    method: fc.oneof(
      { weight: 9, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.constantFrom('PUT', 'DELETE', 'PATCH', 'GET') },
    ),
  })
  const samples = fc.sample(request, { numRuns: options.count, seed: options.seed })
  for (const sample of samples) {
    let index = 0
    const path = sample.operation.path.replace(/\{([^}]+)\}/g, (_match, name: string) =>
      name === 'commandId'
        ? encodeURIComponent(sample.commandId)
        : encodePathValue(String(sample.pathValues[index++ % 3])),
    )
    const query = new URLSearchParams(Object.entries(sample.query)).toString()
    const method = sample.method ?? sample.operation.method
    const headers: Record<string, string> = {}
    if (sample.auth === 'garbage') headers.authorization = 'Bearer plt_not-a-token'
    else if (sample.auth !== 'none') headers.authorization = `Bearer ${target.tokens[sample.auth]}`
    const withBody = method !== 'GET' && method !== 'DELETE'
    if (withBody && sample.body.type) headers['content-type'] = sample.body.type
    const where = `${method} ${path}${query ? `?${query.slice(0, 80)}` : ''}`
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(), 15_000)
    try {
      const response = await fetch(`${target.url}${path}${query ? `?${query}` : ''}`, {
        method,
        headers,
        ...(withBody && { body: sample.body.text }),
        signal: controller.signal,
      })
      report.requests++
      report.byStatus[String(response.status)] = (report.byStatus[String(response.status)] ?? 0) + 1
      const type = response.headers.get('content-type') ?? ''
      if (type.includes('text/event-stream')) {
        controller.abort()
        continue
      }
      const text = await response.text()
      if (response.status >= 500 && !(response.status === 502 || response.status === 504 || response.status === 503))
        report.failures.push(`${where} → ${response.status} ${text.slice(0, 200)}`)
      if (response.status >= 400) {
        if (!type.includes('application/problem+json')) {
          report.failures.push(`${where} → ${response.status} with ${type || 'no content type'}`)
          continue
        }
        const problem = JSON.parse(text) as { code?: string }
        if (!problem.code || !knownCodes.has(problem.code))
          report.failures.push(
            `${where} → ${response.status} with an undocumented code ${JSON.stringify(problem.code)}`,
          )
      }
      if (/\bat [\w.<>]+ \(.*:\d+:\d+\)|node_modules|\bselect .* from\b|\binsert into\b/i.test(text))
        report.failures.push(`${where} → leaks internals: ${text.slice(0, 200)}`)
      // Another caller never sees the owner's private ids (echoing what the caller sent is not a leak).
      if (sample.auth !== 'owner') {
        const sent = `${path}?${query} ${withBody ? sample.body.text : ''}`
        const hidden = sample.auth === 'member' ? target.privateIds.member : target.privateIds.stranger
        const leaked = hidden.filter((id) => text.includes(id) && !sent.includes(id))
        if (leaked.length > 0) report.failures.push(`${where} as ${sample.auth} → shows ${leaked.join(', ')}`)
      }
    } catch (error) {
      if (controller.signal.aborted) {
        report.failures.push(`${where} → no answer within 15 s`)
        continue
      }
      report.failures.push(`${where} → ${(error as Error).message}`)
    } finally {
      clearTimeout(timer)
    }
  }
  const alive = await fetch(`${target.url}/healthz`)
    .then((response) => response.status)
    .catch(() => 0)
  if (alive !== 200) report.failures.push(`the server stopped answering /healthz (${alive})`)
  return report
}
