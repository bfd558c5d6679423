import { describe, expect, it } from 'vitest'
import { freshStanding, standingFreshMs, type ReadStanding } from './run-standing.js'
import { PeriodBudgets } from './period-budgets.js'

const check = (preparedAt: number, userId = 'u1'): ReadStanding['check'] => {
  const periods = new PeriodBudgets().check({ projectId: 'p1', userId })
  return { userId, reads: { counts: periods.read, periods: periods.read }, periods, preparedAt }
}

describe('read-ahead standing of a new run', () => {
  it('is used when read for the same user just now', () => {
    const standing = { check: check(performance.now()), values: { counts: { userActive: 3 }, periods: {} } }
    expect(freshStanding(standing, 'u1')?.counts).toEqual({ userActive: 3 })
  })

  it('is read again when older than the bound, for another user, or missing a value', () => {
    const values = { counts: { userActive: 3 }, periods: {} }
    expect(freshStanding({ check: check(performance.now() - standingFreshMs - 50), values }, 'u1')).toBeUndefined()
    expect(freshStanding({ check: check(performance.now()), values }, 'u2')).toBeUndefined()
    expect(freshStanding({ check: check(performance.now()), values: { counts: {} } }, 'u1')).toBeUndefined()
    expect(freshStanding(undefined, 'u1')).toBeUndefined()
  })
})
