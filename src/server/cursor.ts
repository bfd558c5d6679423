import { isId } from '../store/index.js'
import { HttpProblem } from './problem.js'

/** Cursors are opaque to clients: base64url of the last id of the previous page. */
export function encodeCursor(id: string | null): string | null {
  return id === null ? null : Buffer.from(JSON.stringify({ after: id })).toString('base64url')
}

/** The id a cursor continues after; 400 `invalid_cursor` for anything we did not issue. */
export function decodeCursor(cursor: string | undefined): string | undefined {
  if (cursor === undefined) return undefined
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    const after = (parsed as { after?: unknown } | null)?.after
    if (typeof after === 'string' && isId(after)) return after
  } catch {
    // fall through
  }
  throw new HttpProblem('invalid_cursor', 'cursor is not one this server issued; start again without it')
}

/** A store page as an API list answer. */
export function toListAnswer<T, R>(
  page: { items: T[]; nextCursor: string | null },
  map: (item: T) => R,
): { items: R[]; nextCursor: string | null } {
  return { items: page.items.map(map), nextCursor: encodeCursor(page.nextCursor) }
}

/** A cursor over a list keyed by a string other than an id (paths, command ids): the last key of the page. */
export function encodeKeyCursor(key: string): string {
  return Buffer.from(JSON.stringify({ afterKey: key })).toString('base64url')
}

/** The key a `encodeKeyCursor` cursor continues after; 400 `invalid_cursor` for anything we did not issue. */
export function decodeKeyCursor(cursor: string | undefined): string | undefined {
  if (cursor === undefined) return undefined
  try {
    const value = (JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as { afterKey?: unknown } | null)
      ?.afterKey
    if (typeof value === 'string') return value
  } catch {
    // fall through
  }
  throw new HttpProblem('invalid_cursor', 'cursor is not one this server issued; start again without it')
}
