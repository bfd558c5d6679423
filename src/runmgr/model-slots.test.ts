import { describe, expect, it } from 'vitest'
import { ModelSlots } from './model-slots.js'

const never = new AbortController().signal

describe('ModelSlots', () => {
  it('one user holds at most its share; another user gets a slot at once', async () => {
    const slots = new ModelSlots(4, 2)
    expect(await slots.acquire(never, 'a')).toBe(true)
    expect(await slots.acquire(never, 'a')).toBe(true)
    const thirdForA = slots.acquire(never, 'a')
    expect(slots.waiting).toBe(1)
    expect(await slots.acquire(never, 'b')).toBe(true)
    slots.release('a')
    expect(await thirdForA).toBe(true)
  })

  it('a freed slot goes to the waiting user holding the fewest, not the oldest waiter', async () => {
    const slots = new ModelSlots(2, 2)
    await slots.acquire(never, 'a')
    await slots.acquire(never, 'a')
    const order: string[] = []
    const waits = [
      slots.acquire(never, 'a').then(() => order.push('a1')),
      slots.acquire(never, 'a').then(() => order.push('a2')),
      slots.acquire(never, 'b').then(() => order.push('b1')),
    ]
    slots.release('a')
    await Promise.resolve()
    expect(order).toEqual(['b1'])
    slots.release('a')
    slots.release('b')
    await Promise.all(waits)
    expect(order).toEqual(['b1', 'a1', 'a2'])
  })

  it('an aborted waiter never holds a slot', async () => {
    const slots = new ModelSlots(1)
    await slots.acquire(never, 'a')
    const abort = new AbortController()
    const waiting = slots.acquire(abort.signal, 'b')
    abort.abort()
    expect(await waiting).toBe(false)
    slots.release('a')
    expect(await slots.acquire(never, 'c')).toBe(true)
  })
})
