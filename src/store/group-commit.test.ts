import { describe, expect, it } from 'vitest'
import { GroupCommit } from './group-commit.js'

/** A statement that waits until the test lets it go. */
function gate() {
  let open!: () => void
  const opened = new Promise<void>((resolve) => (open = resolve))
  return { open, opened }
}

describe('group commit', () => {
  it('items that arrive while a statement is in flight share the next one, each answered in its order', async () => {
    const groups: number[][] = []
    const first = gate()
    const group = new GroupCommit<number, string>(async (items) => {
      groups.push(items)
      if (groups.length === 1) await first.opened
      return items.map((item) => `answer ${item}`)
    })
    const answers = [1, 2, 3, 4, 5].map((item) => group.submit(item))
    first.open()
    expect(await Promise.all(answers)).toEqual([1, 2, 3, 4, 5].map((item) => `answer ${item}`))
    expect(groups).toEqual([[1], [2, 3, 4, 5]])
  })

  it('a group is cut at its budget', async () => {
    const groups: string[][] = []
    const first = gate()
    const group = new GroupCommit<string, number>(
      async (items) => {
        groups.push(items)
        if (groups.length === 1) await first.opened
        return items.map((item) => item.length)
      },
      { size: (item) => item.length, maxSize: 4 },
    )
    const answers = ['a', 'bb', 'cc', 'ddd', 'eeeee'].map((item) => group.submit(item))
    first.open()
    expect(await Promise.all(answers)).toEqual([1, 2, 2, 3, 5])
    // An item larger than the budget still goes, alone.
    expect(groups).toEqual([['a'], ['bb', 'cc'], ['ddd'], ['eeeee']])
  })

  it('a statement the database refused is tried again item by item, so only the bad item fails', async () => {
    const groups: string[][] = []
    const first = gate()
    const group = new GroupCommit<string, string>(async (items) => {
      groups.push(items)
      if (groups.length === 1) await first.opened
      if (items.includes('bad')) throw Object.assign(new Error('null value'), { code: '23502' })
      return items
    })
    const answers = ['first', 'ok', 'bad', 'also ok'].map((item) => group.submit(item))
    first.open()
    const settled = await Promise.allSettled(answers)
    expect(settled.map((result) => (result.status === 'fulfilled' ? result.value : 'rejected'))).toEqual([
      'first',
      'ok',
      'rejected',
      'also ok',
    ])
    expect(groups).toEqual([['first'], ['ok', 'bad', 'also ok'], ['ok'], ['bad'], ['also ok']])
  })

  it('a lost connection fails the whole group: it may have committed, so nothing is tried again', async () => {
    const groups: string[][] = []
    const first = gate()
    const group = new GroupCommit<string, string>(async (items) => {
      groups.push(items)
      if (groups.length === 1) await first.opened
      if (groups.length === 2) throw new Error('Connection terminated unexpectedly')
      return items
    })
    const answers = ['first', 'x', 'y'].map((item) => group.submit(item))
    first.open()
    const settled = await Promise.allSettled(answers)
    expect(settled.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'rejected'])
    expect(groups).toEqual([['first'], ['x', 'y']])
  })
})
