import { readFile } from 'node:fs/promises'
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest'
import { openStore, type Store } from '../src/store/index.js'
import { PGlitePreparedStatements } from '../src/store/pglite/prepared-query.js'
import { sql, testDb } from '../src/store/test-access.js'

// The embedded database prepares the statements it repeats (docs/guides/operating.md#storage): parsed
// once, then bound and executed in one message. These check that what a statement returns, and how it
// fails, is the same as through PGlite's own unprepared path.
describe('PGlite prepared statements', () => {
  let prepared: Store
  let unprepared: Store
  beforeAll(async () => {
    const dump = new Blob([await readFile(inject('pgliteTemplatePath'))])
    prepared = await openStore({ pgliteDump: dump })
    unprepared = await openStore({ pgliteDump: dump, prepareStatements: false })
  })
  afterAll(async () => {
    await prepared?.close()
    await unprepared?.close()
  })

  const namedStatements = async (store: Store): Promise<string[]> => {
    const { rows } = await sql<{
      statement: string
    }>`select statement from pg_prepared_statements where from_sql = false`.execute(testDb(store))
    return rows.map((row) => row.statement)
  }

  it('prepares a repeated statement once (not retrieval queries); prepareStatements: false sends it unnamed', async () => {
    for (const store of [prepared, unprepared]) {
      for (let index = 0; index < 3; index++) {
        await sql`select ${index}::int as n`.execute(testDb(store))
        await sql`select ${'[1,0]'}::vector <=> ${'[0,1]'}::vector as d`.execute(testDb(store))
      }
    }
    const named = await namedStatements(prepared)
    expect(named.filter((text) => text.includes('as n'))).toHaveLength(1)
    expect(named.some((text) => text.includes('<=>'))).toBe(false)
    expect(await namedStatements(unprepared)).toEqual([])
  })

  it('binds and returns every kind of value the same as the unprepared path', async () => {
    const at = new Date('2026-12-04T10:11:12.345Z')
    const values = {
      text: 'héllo ✓ "quoted" \\ back',
      count: 42,
      big: '9007199254740993',
      ratio: 0.25,
      flag: false,
      json: { a: [1, 'two', null], b: { c: true } },
      tags: ['x', 'y,z', 'with "quote"'],
      bytes: new Uint8Array([0, 1, 254, 255]),
    }
    const read = async (store: Store): Promise<unknown[]> => {
      const results: unknown[] = []
      for (let index = 0; index < 7; index++) {
        // Past the five custom plans Postgres makes before it may switch a prepared statement to a generic one.
        const { rows } = await sql`select ${values.text}::text as text, ${values.count}::int as count,
          ${values.big}::bigint as big, ${values.ratio}::float8 as ratio, ${values.flag}::boolean as flag,
          ${JSON.stringify(values.json)}::jsonb as json, ${values.tags}::text[] as tags, ${values.bytes}::bytea as bytes,
          ${at}::timestamptz as at, ${null}::text as nothing, ${index}::int as index`.execute(testDb(store))
        results.push(rows[0])
      }
      return results
    }
    const fromPrepared = await read(prepared)
    expect(fromPrepared).toEqual(await read(unprepared))
    expect(fromPrepared[6]).toMatchObject({
      text: values.text,
      json: values.json,
      tags: values.tags,
      at,
      nothing: null,
    })
  })

  it('reports a failed statement with its code and constraint, and the session goes on, in a transaction or not', async () => {
    const db = testDb(prepared)
    await sql`create table prepared_probe (id int primary key, name text)`.execute(db)
    const insert = (id: number) => sql`insert into prepared_probe (id, name) values (${id}, ${'n'})`.execute(db)
    await insert(1)
    const error = (await insert(1).catch((caught: unknown) => caught)) as { code?: string; constraint?: string }
    expect(error).toMatchObject({ code: '23505', constraint: 'prepared_probe_pkey' })
    await insert(2)

    const inTransaction = await db
      .transaction()
      .execute(async (tx) => {
        await sql`insert into prepared_probe (id, name) values (${3}, ${'n'})`.execute(tx)
        await sql`insert into prepared_probe (id, name) values (${1}, ${'n'})`.execute(tx)
      })
      .catch((caught: unknown) => caught)
    expect(inTransaction).toMatchObject({ code: '23505' })
    const { rows } = await sql<{ id: number }>`select id from prepared_probe where id > ${0} order by id`.execute(db)
    expect(rows.map((row) => row.id)).toEqual([1, 2])
  })

  it('a table changed under a prepared select * is prepared again and answers with the new columns', async () => {
    const db = testDb(prepared)
    await sql`create table prepared_shape (id int primary key)`.execute(db)
    await sql`insert into prepared_shape (id) values (1)`.execute(db)
    const read = async () => (await sql`select * from prepared_shape where id = ${1}`.execute(db)).rows
    expect(await read()).toEqual([{ id: 1 }])
    expect(await read()).toEqual([{ id: 1 }])
    await sql`alter table prepared_shape add column label text default 'x'`.execute(db)
    expect(await read()).toEqual([{ id: 1, label: 'x' }])
  })

  it('keeps at most its bound of named statements, closing the least recently used', async () => {
    const { PGlite, protocol } = await import('@electric-sql/pglite')
    const pglite = await PGlite.create()
    try {
      const statements = new PGlitePreparedStatements(pglite, protocol.serialize, 2)
      const named = async (): Promise<string[]> =>
        (
          await pglite.query<{ statement: string }>(
            'select statement from pg_prepared_statements where from_sql = false order by statement',
          )
        ).rows.map((row) => row.statement)
      const a = 'select $1::int + 1 as a'
      const b = 'select $1::int + 2 as b'
      const c = 'select $1::int + 3 as c'
      expect((await statements.query(a, [1])).rows).toEqual([{ a: 2 }])
      expect((await statements.query(b, [1])).rows).toEqual([{ b: 3 }])
      expect((await statements.query(a, [2])).rows).toEqual([{ a: 3 }]) // a is now the most recently used
      expect((await statements.query(c, [1])).rows).toEqual([{ c: 4 }])
      expect(await named()).toEqual([a, c])
      expect((await statements.query(b, [5])).rows).toEqual([{ b: 7 }]) // prepared again, closing a
      expect(await named()).toEqual([b, c])
    } finally {
      await pglite.close()
    }
  })
})
