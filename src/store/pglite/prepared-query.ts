import type { messages, parse, protocol, Results } from '@electric-sql/pglite'

type BackendMessage = messages.BackendMessage

/** What the prepared path calls on a PGlite instance (all public API of `@electric-sql/pglite`). */
export interface PGliteProtocolLike {
  execProtocol(message: Uint8Array): Promise<{ messages: BackendMessage[] }>
  runExclusive<T>(fn: () => Promise<T>): Promise<T>
  isInTransaction(): boolean
  readonly serializers: Record<number | string, (value: unknown) => string>
  readonly parsers: Parameters<typeof parse.parseResults>[1]
}

/** The package's protocol helpers, handed in so this module loads none of PGlite itself. */
export interface PGliteProtocolHelpers {
  serialize: typeof protocol.serialize
  parseResults: typeof parse.parseResults
  parseDescribeStatementResults: typeof parse.parseDescribeStatementResults
}

interface Prepared {
  name: string
  parameterTypes: number[]
}

/** Postgres' "cached plan must not change result type" (a table changed under a prepared `select *`). */
const changedResultType = '0A000'

/**
 * Named prepared statements for the embedded database. PGlite's own `query` parses and plans the text on
 * every call, in six separate calls into the database. Here a statement is parsed once (with its
 * parameters' types); each later call binds, executes and syncs in one message. Planning each time also
 * sized every index of every table the statement names, and with PGlite's small file cache (≈ 45 open
 * files) that reopened most of a round's files on every statement (docs/guides/operating.md#storage).
 */
export class PGlitePreparedStatements {
  readonly #pglite: PGliteProtocolLike
  readonly #helpers: PGliteProtocolHelpers
  readonly #statements = new Map<string, Prepared>()
  readonly #max: number
  #named = 0

  constructor(pglite: PGliteProtocolLike, helpers: PGliteProtocolHelpers, maxStatements = 256) {
    this.#pglite = pglite
    this.#helpers = helpers
    this.#max = maxStatements
  }

  /** False once `maxStatements` texts are prepared: the caller sends the rest unnamed. */
  canPrepare(sql: string): boolean {
    return this.#statements.has(sql) || this.#statements.size < this.#max
  }

  async query<R>(sql: string, parameters: readonly unknown[]): Promise<Results<R>> {
    return await this.#pglite.runExclusive(async () => {
      try {
        return await this.#execute<R>(sql, parameters)
      } catch (error) {
        if ((error as { code?: unknown }).code !== changedResultType) throw error
        // A table changed under the prepared text: prepare it again, under a new name (the old one stays
        // until the session ends), and run it again unless the failure aborted a transaction block.
        this.#statements.delete(sql)
        if (this.#pglite.isInTransaction()) throw error
        return await this.#execute<R>(sql, parameters)
      }
    })
  }

  async #execute<R>(sql: string, parameters: readonly unknown[]): Promise<Results<R>> {
    const statement = this.#statements.get(sql) ?? (await this.#prepare(sql))
    const { serialize } = this.#helpers
    const values = parameters.map((value, index) => this.#serialize(value, statement.parameterTypes[index]))
    const { messages } = await this.#pglite.execProtocol(
      concat([
        serialize.bind({ statement: statement.name, values }),
        serialize.describe({ type: 'P' }),
        serialize.execute({}),
        serialize.sync(),
      ]),
    )
    return this.#helpers.parseResults(messages, this.#pglite.parsers)[0] as Results<R>
  }

  async #prepare(sql: string): Promise<Prepared> {
    const { serialize } = this.#helpers
    const name = `plinth_${++this.#named}`
    const { messages } = await this.#pglite.execProtocol(
      concat([serialize.parse({ name, text: sql }), serialize.describe({ type: 'S', name }), serialize.sync()]),
    )
    const statement = { name, parameterTypes: this.#helpers.parseDescribeStatementResults(messages) }
    this.#statements.set(sql, statement)
    return statement
  }

  #serialize(value: unknown, type: number | undefined): string | null {
    if (value === null || value === undefined) return null
    const serialize = type === undefined ? undefined : this.#pglite.serializers[type]
    return serialize ? serialize(value) : String(value)
  }
}

function concat(parts: Uint8Array[]): Uint8Array {
  let length = 0
  for (const part of parts) length += part.length
  const message = new Uint8Array(length)
  let offset = 0
  for (const part of parts) {
    message.set(part, offset)
    offset += part.length
  }
  return message
}
