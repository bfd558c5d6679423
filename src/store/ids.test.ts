import { describe, expect, it, vi } from 'vitest'
import { isId, newId, idAfter } from './ids.js'

describe('newId', () => {
  it('makes ULIDs whose time part is the current millisecond', async () => {
    // A fresh module: ids made earlier in this process (under a faked clock, say) carry on from their time.
    vi.resetModules()
    const fresh = await import('./ids.js')
    const before = Date.now()
    const id = fresh.newId()
    const after = Date.now()
    expect(isId(id)).toBe(true)
    const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
    const time = [...id.slice(0, 10)].reduce((value, char) => value * 32 + alphabet.indexOf(char), 0)
    expect(time).toBeGreaterThanOrEqual(before)
    expect(time).toBeLessThanOrEqual(after + 1)
  })

  it('is strictly increasing and unique, also many times within one millisecond', () => {
    const ids = Array.from({ length: 20_000 }, () => newId())
    expect(new Set(ids).size).toBe(ids.length)
    for (let index = 1; index < ids.length; index++) expect(ids[index]! > ids[index - 1]!).toBe(true)
  })

  it('draws fresh randomness for a new millisecond', async () => {
    const first = newId()
    await new Promise((resolve) => setTimeout(resolve, 3))
    const second = newId()
    expect(second.slice(10)).not.toBe(first.slice(10))
  })
})

describe('idAfter', () => {
  it('gives the id right after another in sort order, carrying over', () => {
    expect(idAfter('01ARZ3NDEKTSV4RRFFQ69G5FAV')).toBe('01ARZ3NDEKTSV4RRFFQ69G5FAW')
    expect(idAfter('01ARZ3NDEKTSV4RRFFQ69G5FAZ')).toBe('01ARZ3NDEKTSV4RRFFQ69G5FB0')
    const id = newId()
    expect(idAfter(id) > id && isId(idAfter(id))).toBe(true)
  })
})
