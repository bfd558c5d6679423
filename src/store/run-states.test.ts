import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import {
  isRunTransition,
  moveInto,
  runStatuses,
  runTransitions,
  type RunCreatedStatus,
  type RunMove,
} from './run-states.js'
import { activeRunStatuses, terminalRunStatuses } from './run-repository.js'

const root = new URL('../../', import.meta.url)

describe('the run state machine (run-states.ts)', () => {
  it('names exactly the statuses the database allows', () => {
    const migration = readFileSync(new URL('migrations/0003_runs.sql', root), 'utf8')
    const check = /status\s+text not null check \(status in \(([^)]*)\)\)/.exec(migration)
    expect(check).not.toBeNull()
    const allowed = check![1]!.split(',').map((value) => value.trim().replace(/^'|'$/g, ''))
    expect([...runStatuses]).toEqual(allowed)
    expect([...activeRunStatuses, ...terminalRunStatuses].sort()).toEqual([...runStatuses].sort())
  })

  it('lets a terminal run move only by the documented resume of a failed run', () => {
    const leaving = runTransitions.filter((rule) => rule.from !== null && terminalRunStatuses.includes(rule.from))
    expect(leaving.map((rule) => [rule.from, rule.to, rule.by])).toEqual([['failed', 'running', 'resume']])
  })

  it('creates runs only queued or running', () => {
    expect(
      runTransitions
        .filter((rule) => rule.from === null)
        .map((rule) => rule.to)
        .sort(),
    ).toEqual(['queued', 'running'])
    expect(runTransitions.every((rule) => rule.from !== null || rule.by === 'create')).toBe(true)
  })

  it('reaches every status from queued, and ends every run that is not terminal', () => {
    const reached = new Set<string>(['queued'])
    for (let grown = true; grown;) {
      grown = false
      for (const rule of runTransitions) {
        if (rule.from !== null && reached.has(rule.from) && !reached.has(rule.to)) {
          reached.add(rule.to)
          grown = true
        }
      }
    }
    expect([...reached].sort()).toEqual([...runStatuses].sort())
    // Every active state has a way out to a terminal one (a cancel, at least).
    for (const status of activeRunStatuses)
      expect(runTransitions.some((rule) => rule.from === status && terminalRunStatuses.includes(rule.to))).toBe(true)
  })

  it('lets only the driver and cancels leave running, and only the loop wait', () => {
    expect(runTransitions.filter((rule) => rule.to === 'requires_action').map((rule) => [rule.from, rule.by])).toEqual([
      ['running', 'loop'],
    ])
    expect(runTransitions.filter((rule) => rule.to === 'completed').map((rule) => [rule.from, rule.by])).toEqual([
      ['running', 'loop'],
    ])
  })

  it('computes the moves that end a run from the table', () => {
    expect(moveInto('expired')).toEqual({ from: ['requires_action'], to: 'expired' })
    expect([...moveInto('cancelled').from].sort()).toEqual(['queued', 'requires_action', 'running'])
    expect(isRunTransition('completed', 'running')).toBe(false)
    expect(isRunTransition('failed', 'running')).toBe(true)
  })

  it('types only listed moves (checked by tsc)', () => {
    const listed: RunMove[] = [
      { from: ['failed'], to: 'running' },
      { from: ['running'], to: 'requires_action' },
      moveInto('cancelled'),
    ]
    // @ts-expect-error completed is terminal: no move leaves it
    const leavesTerminal: RunMove = { from: ['completed'], to: 'running' }
    // @ts-expect-error a waiting run is never completed directly
    const skipsTheLoop: RunMove = { from: ['requires_action'], to: 'completed' }
    // @ts-expect-error a run is never created waiting
    const createdWaiting: RunCreatedStatus = 'requires_action'
    expect(
      [...listed, leavesTerminal, skipsTheLoop].every((move) =>
        move.from.every((from) => isRunTransition(from, move.to)),
      ),
    ).toBe(false)
    expect(createdWaiting).toBe('requires_action')
  })

  it('is the table docs/architecture.md shows under "Run states"', () => {
    const doc = readFileSync(new URL('docs/architecture.md', root), 'utf8')
    const section = doc.slice(doc.indexOf('## Run states'))
    const lines = section.split('\n')
    const header = lines.findIndex((line) => line.startsWith('| From | To | By | When | Made by |'))
    expect(header).toBeGreaterThan(0)
    const rows: string[] = []
    for (const line of lines.slice(header + 2)) {
      if (!line.startsWith('|')) break
      rows.push(line)
    }
    const state = (status: string | null) => (status === null ? '—' : `\`${status}\``)
    expect(rows).toEqual(
      runTransitions.map(
        (rule) => `| ${state(rule.from)} | ${state(rule.to)} | ${rule.by} | ${rule.when} | ${rule.madeBy} |`,
      ),
    )
  })
})
