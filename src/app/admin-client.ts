import { mkdir, readFile, rm, writeFile } from 'node:fs/promises'
import { request as httpRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { userInfo } from 'node:os'
import { join } from 'node:path'
import { parse as parseConnectionString } from 'pg-connection-string'
import type { ApiToken, IssuedToken, User } from '../store/index.js'

// The CLI's side of a running server: loads no database code (only types from the store).

/** What `plinth users|tokens` needs, whether it holds the database or talks to a running server. */
export interface UserAdmin {
  createUser(name: string, tokenName: string): Promise<{ user: User; token: IssuedToken } | 'name_taken'>
  listUsers(): Promise<User[]>
  findUser(idOrName: string): Promise<User | undefined>
  setDisabled(userId: string, disabled: boolean): Promise<User | undefined>
  createToken(userId: string, name: string): Promise<IssuedToken>
  listTokens(userId: string): Promise<ApiToken[]>
  revokeToken(tokenId: string): Promise<{ id: string; prefix: string | null } | undefined>
}

export async function all<T>(
  fetchPage: (after: string | undefined) => Promise<{ items: T[]; nextCursor: string | null }>,
): Promise<T[]> {
  const items: T[] = []
  let after: string | undefined
  for (;;) {
    const page = await fetchPage(after)
    items.push(...page.items)
    if (!page.nextCursor) return items
    after = page.nextCursor
  }
}

/** The address a running server announces in its data directory (for the CLI beside it). */
export interface ServerAnnouncement {
  pid: number
  url: string
  /** Which database it serves ({@link databaseIdentity}): a CLI on another one must not act through it. */
  database?: string
}

/**
 * Names the database a URL reaches as the pg driver reads it (host, port, database and user, with the
 * driver's PG* environment defaults; never the password), or the embedded one: servers on different
 * Postgres databases may share a data directory. Undefined when the URL cannot be read.
 */
export function databaseIdentity(databaseUrl: string | undefined): string | undefined {
  if (!databaseUrl) return 'embedded'
  try {
    const parsed = parseConnectionString(databaseUrl)
    const user = parsed.user || process.env.PGUSER || userInfo().username
    const given = parsed.host || process.env.PGHOST || 'localhost'
    // A host name is case-insensitive; a socket directory is a path.
    const host = given.startsWith('/') ? given : given.toLowerCase()
    const port = String(parsed.port || process.env.PGPORT || 5432)
    const database = parsed.database || process.env.PGDATABASE || user
    return `postgres:${JSON.stringify([host, port, database, user])}`
  } catch {
    return undefined
  }
}

/** The server announced in the data directory when it serves the database the CLI was given. */
export async function runningServerOn(
  dataDir: string,
  databaseUrl: string | undefined,
): Promise<ServerAnnouncement | undefined> {
  const server = await runningServer(dataDir)
  if (!server) return undefined
  // An announcement without the field is from an older server: trusted only for the embedded database.
  const announced = server.database ?? 'embedded'
  const wanted = databaseIdentity(databaseUrl)
  return wanted !== undefined && announced === wanted ? server : undefined
}

const announcementFile = 'server.json'

export async function announceServer(dataDir: string, announcement: ServerAnnouncement): Promise<() => Promise<void>> {
  const path = join(dataDir, announcementFile)
  await mkdir(dataDir, { recursive: true })
  await writeFile(path, JSON.stringify(announcement))
  return async () => {
    // Servers on Postgres may share a data directory: remove only our own announcement.
    const current = await runningServer(dataDir)
    if (!current || current.pid === announcement.pid) await rm(path, { force: true })
  }
}

export async function runningServer(dataDir: string): Promise<ServerAnnouncement | undefined> {
  try {
    const parsed = JSON.parse(await readFile(join(dataDir, announcementFile), 'utf8')) as ServerAnnouncement
    process.kill(parsed.pid, 0)
    return parsed
  } catch {
    return undefined
  }
}

/** The server could not be asked at all, or refused the admin token: nothing was done. */
export class AdminApiUnusable extends Error {}

/** One call to a running server's admin API; a refusal or a server error throws, with the server's words. */
async function adminCall<T>(
  url: string,
  adminToken: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: T }> {
  // node:http rather than fetch: fetch's HTTP parser is WebAssembly that Node waits to finish compiling at
  // exit, which added a quarter of a second to every CLI call (docs/reference/benchmarks.md#start-and-cli-latency).
  const target = new URL(`${url}/api/admin${path}`)
  const payload = body === undefined ? undefined : JSON.stringify(body)
  const response = await new Promise<{ status: number; statusText: string; text: string }>((resolve, reject) => {
    const outgoing = (target.protocol === 'https:' ? httpsRequest : httpRequest)(
      target,
      {
        method,
        headers: {
          authorization: `Bearer ${adminToken}`,
          ...(payload !== undefined && {
            'content-type': 'application/json',
            'content-length': String(Buffer.byteLength(payload)),
          }),
        },
      },
      (incoming) => {
        const chunks: Buffer[] = []
        incoming.on('data', (chunk: Buffer) => chunks.push(chunk))
        incoming.on('error', reject)
        incoming.on('end', () =>
          resolve({
            status: incoming.statusCode ?? 0,
            statusText: incoming.statusMessage ?? '',
            text: Buffer.concat(chunks).toString('utf8'),
          }),
        )
      },
    )
    outgoing.on('error', (error: NodeJS.ErrnoException) =>
      reject(
        error.code === 'ECONNREFUSED' || error.code === 'ECONNRESET'
          ? new AdminApiUnusable(`the server at ${url} does not answer (${error.code})`)
          : error,
      ),
    )
    outgoing.end(payload)
  })
  const text = response.text
  if (response.status >= 500 || response.status === 401 || response.status === 403) {
    const detail = text ? ((JSON.parse(text) as { detail?: string }).detail ?? text) : response.statusText
    const message = `the running server at ${url} answered ${response.status}: ${detail}`
    throw response.status >= 500 ? new Error(message) : new AdminApiUnusable(message)
  }
  return { status: response.status, body: (text ? JSON.parse(text) : undefined) as T }
}

/** What `plinth audit verify` reports: offline, or from `GET /api/admin/audit/verify`. */
export interface AuditVerdict {
  ok: boolean
  checked: number
  firstBad?: { id: number; reason: string }
  checkpoint?: { throughId: number; throughHash: string; createdAt: string }
}

export async function httpAuditVerify(url: string, adminToken: string): Promise<AuditVerdict> {
  const answer = await adminCall<AuditVerdict>(url, adminToken, 'GET', '/audit/verify')
  // A server from before this route.
  if (answer.status !== 200)
    throw new Error(
      `the running server at ${url} answered ${answer.status} to GET /api/admin/audit/verify (stop it, or upgrade it)`,
    )
  return answer.body
}

/** The body of an answer with the status expected; any other is an error saying what the server said. */
function succeeded<T>(answer: { status: number; body: T }, expected: number): T {
  if (answer.status === expected) return answer.body
  const detail = (answer.body as { detail?: unknown } | undefined)?.detail
  throw new Error(typeof detail === 'string' ? detail : `the server answered ${answer.status}`)
}

/** Through a running server's admin API (PLINTH_ADMIN_TOKEN), while it holds the embedded database. */
export function httpUserAdmin(url: string, adminToken: string): UserAdmin {
  const call = <T>(method: string, path: string, body?: unknown) => adminCall<T>(url, adminToken, method, path, body)
  const admin: UserAdmin = {
    createUser: async (name, tokenName) => {
      const answer = await call<{ user: User; token: IssuedToken }>('POST', '/users', { name, tokenName })
      if (answer.status === 409) return 'name_taken'
      return succeeded(answer, 201)
    },
    listUsers: () =>
      all(async (after) =>
        succeeded(
          await call<{ items: User[]; nextCursor: string | null }>(
            'GET',
            `/users?limit=200${after ? `&cursor=${after}` : ''}`,
          ),
          200,
        ),
      ),
    findUser: async (idOrName) => {
      if (/^[0-9A-HJKMNP-TV-Z]{26}$/.test(idOrName)) {
        const byId = await call<User>('GET', `/users/${idOrName}`)
        if (byId.status === 200) return byId.body
      }
      // Names are unique regardless of case; an exact match first (two may predate that rule).
      const users = await admin.listUsers()
      return (
        users.find((user) => user.name === idOrName) ??
        users.find((user) => user.name.toLowerCase() === idOrName.toLowerCase())
      )
    },
    setDisabled: async (userId, disabled) => {
      const answer = await call<User>('PATCH', `/users/${userId}`, { disabled })
      return answer.status === 404 ? undefined : succeeded(answer, 200)
    },
    createToken: async (userId, name) =>
      succeeded(await call<IssuedToken>('POST', `/users/${userId}/tokens`, { name }), 201),
    listTokens: (userId) =>
      all(async (after) =>
        succeeded(
          await call<{ items: ApiToken[]; nextCursor: string | null }>(
            'GET',
            `/users/${userId}/tokens?limit=200${after ? `&cursor=${after}` : ''}`,
          ),
          200,
        ),
      ),
    revokeToken: async (tokenId) => {
      if (!/^[0-9A-HJKMNP-TV-Z]{26}$/.test(tokenId)) return undefined
      const answer = await call<undefined>('DELETE', `/tokens/${tokenId}`)
      return answer.status === 204 ? { id: tokenId, prefix: null } : undefined
    },
  }
  return admin
}
