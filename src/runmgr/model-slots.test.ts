import { describe, expect, it } from 'vitest'
import { ModelSlots } from './model-slots.js'

describe('ModelSlots', () => {
  it('hands slots out first come, first served, and a waiter that aborts leaves the queue holding nothing', async () => {
    const slots = new ModelSlots(1)
    const never = new AbortController().signal
    expect(await slots.acquire(never)).toBe(true)
    const order: string[] = []
    const cancelled = new AbortController()
    const a = slots.acquire(cancelled.signal).then((held) => order.push(`a:${held}`))
    const b = slots.acquire(never).then((held) => order.push(`b:${held}`))
    const c = slots.acquire(never).then((held) => order.push(`c:${held}`))
    expect(slots.waiting).toBe(3)
    cancelled.abort()
    await a
    expect(slots.waiting).toBe(2)
    slots.release()
    await b
    slots.release()
    await c
    expect(order).toEqual(['a:false', 'b:true', 'c:true'])
    slots.release()
    // All free again: one slot, taken at once.
    expect(await slots.acquire(never)).toBe(true)
    const aborted = new AbortController()
    aborted.abort()
    expect(await slots.acquire(aborted.signal)).toBe(false)
  })
})
