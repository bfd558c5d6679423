import { monotonicFactory } from 'ulid'

const nextUlid = monotonicFactory()

/** A new sortable id (ULID, 26 chars of Crockford base32). */
export function newId(): string {
  return nextUlid()
}

const ulidPattern = /^[0-9A-HJKMNP-TV-Z]{26}$/

/** Whether a string has the shape of an id issued by `newId`. */
export function isId(value: string): boolean {
  return ulidPattern.test(value)
}
