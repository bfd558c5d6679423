import type { messages, protocol, Results } from '@electric-sql/pglite'
import { planEachTime } from '../prepared-statements.js'

type BackendMessage = messages.BackendMessage
type ParseValue = (text: string, type: number) => unknown

/** What the prepared path calls on a PGlite instance (all public API of `@electric-sql/pglite`). */
export interface PGliteProtocolLike {
  execProtocol(message: Uint8Array): Promise<{ messages: BackendMessage[] }>
  runExclusive<T>(fn: () => Promise<T>): Promise<T>
  isInTransaction(): boolean
  readonly serializers: Record<number | string, (value: unknown) => string>
  readonly parsers: Record<number | string, ParseValue>
}

/** The package's message serialiser, handed in so this module loads none of PGlite itself. */
export type PGliteSerialize = typeof protocol.serialize

interface Column {
  name: string
  type: number
  parse: ParseValue | undefined
}

interface Prepared {
  name: string
  parameterTypes: number[]
  /** From the statement's description; empty when it returns no rows. */
  columns: Column[]
  fields: Array<{ name: string; dataTypeID: number }>
}

/** Postgres' "cached plan must not change result type" (a table changed under a prepared `select *`). */
const changedResultType = '0A000'

/**
 * Named prepared statements for the embedded database, at most `maxStatements` of them (the least
 * recently used is closed to make room). PGlite's own `query` parses and plans the text on
 * every call, in six separate calls into the database, and copies its table of type parsers to read each
 * result. Here a statement is parsed and described once; each later call binds, executes and syncs in one
 * message, and its rows are read with the columns' parsers found at preparation. Planning each time also
 * sized every index of every table the statement names, and with PGlite's small file cache (≈ 45 open
 * files) that reopened most of a round's files on every statement (docs/guides/operating.md#storage).
 */
export class PGlitePreparedStatements {
  readonly #pglite: PGliteProtocolLike
  readonly #serialize: PGliteSerialize
  /** By text, least recently used first. */
  readonly #statements = new Map<string, Prepared>()
  readonly #max: number
  /** Names no longer used, closed in the next preparation's message. */
  readonly #closeLater: string[] = []
  #named = 0

  constructor(pglite: PGliteProtocolLike, serialize: PGliteSerialize, maxStatements = 256) {
    this.#pglite = pglite
    this.#serialize = serialize
    this.#max = maxStatements
  }

  /** Whether `sql` goes through here: any parameterised text but a retrieval query (planned each time). */
  accepts(sql: string): boolean {
    return this.#statements.has(sql) || !planEachTime.test(sql)
  }

  async query<R>(sql: string, parameters: readonly unknown[]): Promise<Results<R>> {
    return await this.#pglite.runExclusive(async () => {
      try {
        return await this.#execute<R>(sql, parameters)
      } catch (error) {
        if ((error as { code?: unknown }).code !== changedResultType) throw error
        // A table changed under the prepared text: prepare it again, under a new name (the old one is
        // closed with the next preparation), and run it again unless the failure aborted a transaction block.
        const stale = this.#statements.get(sql)
        if (stale) this.#closeLater.push(stale.name)
        this.#statements.delete(sql)
        if (this.#pglite.isInTransaction()) throw error
        return await this.#execute<R>(sql, parameters)
      }
    })
  }

  async #execute<R>(sql: string, parameters: readonly unknown[]): Promise<Results<R>> {
    let statement = this.#statements.get(sql)
    if (statement) {
      // Most recently used last: the first entry is the one to close when a new text needs room.
      this.#statements.delete(sql)
      this.#statements.set(sql, statement)
    } else {
      statement = await this.#prepare(sql)
    }
    const serialize = this.#serialize
    const values = parameters.map((value, index) => this.#text(value, statement.parameterTypes[index]))
    const { messages } = await this.#pglite.execProtocol(
      concat([serialize.bind({ statement: statement.name, values }), serialize.execute({}), serialize.sync()]),
    )
    return readResults<R>(messages, statement)
  }

  async #prepare(sql: string): Promise<Prepared> {
    const serialize = this.#serialize
    const name = `plinth_${++this.#named}`
    const parts = [serialize.parse({ name, text: sql }), serialize.describe({ type: 'S', name }), serialize.sync()]
    if (this.#statements.size >= this.#max) {
      // Room for it: the least recently used statement is closed in the same message.
      const [oldest, evicted] = this.#statements.entries().next().value as [string, Prepared]
      this.#statements.delete(oldest)
      this.#closeLater.push(evicted.name)
    }
    for (const stale of this.#closeLater.splice(0)) parts.unshift(serialize.close({ type: 'S', name: stale }))
    const { messages } = await this.#pglite.execProtocol(concat(parts))
    let parameterTypes: number[] = []
    let columns: Column[] = []
    for (const message of messages) {
      if (message.name === 'parameterDescription') {
        parameterTypes = (message as messages.ParameterDescriptionMessage).dataTypeIDs
      } else if (message.name === 'rowDescription') {
        columns = (message as messages.RowDescriptionMessage).fields.map((field) => ({
          name: field.name,
          type: field.dataTypeID,
          parse: this.#pglite.parsers[field.dataTypeID],
        }))
      }
    }
    const fields = columns.map((column) => ({ name: column.name, dataTypeID: column.type }))
    const statement = { name, parameterTypes, columns, fields }
    this.#statements.set(sql, statement)
    return statement
  }

  #text(value: unknown, type: number | undefined): string | null {
    if (value === null || value === undefined) return null
    const serialize = type === undefined ? undefined : this.#pglite.serializers[type]
    return serialize ? serialize(value) : String(value)
  }
}

function readResults<R>(messages: BackendMessage[], statement: Prepared): Results<R> {
  const { columns } = statement
  const rows: Record<string, unknown>[] = []
  let affectedRows = 0
  for (const message of messages) {
    if (message.name === 'dataRow') {
      const values = (message as messages.DataRowMessage).fields
      const row: Record<string, unknown> = {}
      for (let index = 0; index < columns.length; index++) {
        const column = columns[index]!
        const text = values[index]
        row[column.name] =
          text === null || text === undefined ? null : column.parse ? column.parse(text, column.type) : text
      }
      rows.push(row)
    } else if (message.name === 'commandComplete') {
      affectedRows = rowCount((message as messages.CommandCompleteMessage).text)
    }
  }
  return { rows: rows as R[], fields: statement.fields, affectedRows }
}

/** Rows a command changed, from its completion tag (`INSERT 0 3`, `UPDATE 2`, …), as PGlite counts them. */
function rowCount(tag: string): number {
  const parts = tag.split(' ')
  switch (parts[0]) {
    case 'INSERT':
      return Number.parseInt(parts[2] ?? '0', 10)
    case 'UPDATE':
    case 'DELETE':
    case 'COPY':
    case 'MERGE':
      return Number.parseInt(parts[1] ?? '0', 10)
    default:
      return 0
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
