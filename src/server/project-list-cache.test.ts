import { describe, expect, it } from 'vitest'
import { AccessSignals } from '../store/index.js'
import { ProjectListCache } from './project-list-cache.js'

describe('ProjectListCache', () => {
  const body = (bytes: number) => Buffer.alloc(bytes, 'x')

  it('keeps a listing per user, size and cursor until a change is announced; a listing read across a change is not kept', () => {
    const access = new AccessSignals()
    const cache = new ProjectListCache(access)
    cache.set('u1', 50, undefined, body(10), cache.generation)
    cache.set('u2', 50, undefined, body(10), cache.generation)
    expect(cache.get('u1', 50, undefined)?.length).toBe(10)
    expect(cache.get('u1', 20, undefined)).toBeUndefined()
    expect(cache.get('u1', 50, 'c')).toBeUndefined()
    // Tokens do not change listings; a disabled user's go; any project change empties it.
    access.deliver('token:t1')
    expect(cache.get('u1', 50, undefined)).toBeDefined()
    access.deliver('user:u1')
    expect(cache.get('u1', 50, undefined)).toBeUndefined()
    expect(cache.get('u2', 50, undefined)).toBeDefined()
    access.deliver('project:p1')
    expect(cache.get('u2', 50, undefined)).toBeUndefined()
    // Read before a change, stored after it: dropped.
    const before = cache.generation
    access.deliver()
    cache.set('u1', 50, undefined, body(10), before)
    expect(cache.get('u1', 50, undefined)).toBeUndefined()
  })

  it('is bounded in bytes (oldest out) and its entries lapse', async () => {
    const cache = new ProjectListCache(new AccessSignals(), { ttlMs: 50, maxBytes: 1000 })
    for (let user = 0; user < 10; user++) cache.set(`u${user}`, 50, undefined, body(200), cache.generation)
    const kept = Array.from({ length: 10 }, (_, user) => cache.get(`u${user}`, 50, undefined) !== undefined)
    expect(kept).toEqual([false, false, false, false, false, true, true, true, true, true])
    // Too large for the cache at all: not kept.
    cache.set('big', 50, undefined, body(600), cache.generation)
    expect(cache.get('big', 50, undefined)).toBeUndefined()
    await new Promise((resolve) => setTimeout(resolve, 60))
    expect(cache.get('u9', 50, undefined)).toBeUndefined()
  })
})
