import { describe, expect, it } from 'vitest'
import { databaseIdentity } from '../src/app/admin-client.js'

// The CLI goes through a server announced in the data directory only when both name one database
// (docs/reference/cli.md): the name must tell databases apart as the pg driver does, and hold no password.
describe('the database a server announces', () => {
  it('names host, port, database and user as the driver reads them, never the password', () => {
    expect(databaseIdentity(undefined)).toBe('embedded')
    const plain = databaseIdentity('postgres://u:secret@db.example:5432/app')
    expect(plain).toBe(databaseIdentity('postgresql://u:other@DB.example/app'))
    expect(plain).not.toContain('secret')
    // The driver honours ?port= and ?host=: so does the name.
    expect(databaseIdentity('postgres://u@h/app?port=6543')).not.toBe(databaseIdentity('postgres://u@h/app'))
    expect(databaseIdentity('postgres:///app?host=/var/run/postgresql')).toContain('/var/run/postgresql')
    for (const url of ['postgres://u:se:cret@/db', 'postgres://u:p%40ss@h/db'])
      expect(databaseIdentity(url) ?? '').not.toMatch(/cret|p%40ss|p@ss/)
  })

  it('tells different databases, users and servers apart', () => {
    const names = [
      'postgres://u@h/a',
      'postgres://u@h/b',
      'postgres://v@h/a',
      'postgres://u@h:5433/a',
      'postgres://u@other/a',
    ].map(databaseIdentity)
    expect(new Set(names).size).toBe(names.length)
  })
})
