import type pg from 'pg'
import { storableParameters } from './storable.js'

/** Statements whose best plan depends on their values (retrieval): planned afresh every time. */
export const planEachTime = /<=>|tsquery|ts_rank/

/**
 * Makes every statement's parameters storable (`storableParameters`): a NUL in a string would fail the
 * statement. Installed before `prepareRepeatedStatements`, which then calls through it.
 */
export function guardParameters(pool: pg.Pool): void {
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown
    ;(client as unknown as { query: (...args: unknown[]) => unknown }).query = (
      config: unknown,
      values?: unknown,
      callback?: unknown,
    ) => {
      if (Array.isArray(values)) return query(config, storableParameters(values), callback)
      if (config !== null && typeof config === 'object' && Array.isArray((config as { values?: unknown }).values)) {
        const statement = config as { values: unknown[] }
        return query({ ...statement, values: storableParameters(statement.values) }, values, callback)
      }
      return query(config, values, callback)
    }
  })
}

/**
 * Makes a pool's connections prepare the parameterised statements the server sends again and again
 * (named, per connection): Postgres then parses them once and can reuse their plan, instead of parsing
 * and planning on every call — about half of a short statement's time in Postgres here. Statements
 * without parameters, retrieval queries, and anything past `maxPerConnection` distinct texts (a bound on
 * what each backend keeps) are sent unnamed, as before.
 */
export function prepareRepeatedStatements(pool: pg.Pool, maxPerConnection = 256): void {
  pool.on('connect', (client) => {
    const names = new Map<string, string>()
    const query = client.query.bind(client) as (...args: unknown[]) => unknown
    ;(client as unknown as { query: (...args: unknown[]) => unknown }).query = (
      config: unknown,
      values?: unknown,
      callback?: unknown,
    ) => {
      if (
        typeof config !== 'string' ||
        !Array.isArray(values) ||
        values.length === 0 ||
        typeof callback === 'function'
      ) {
        return query(config, values, callback)
      }
      // A known text skips the retrieval check: only texts that passed it were named.
      let name = names.get(config)
      if (name === undefined && names.size < maxPerConnection && !planEachTime.test(config)) {
        name = `plinth_${names.size + 1}`
        names.set(config, name)
      }
      return name === undefined ? query(config, values) : query({ name, text: config, values })
    }
  })
}
