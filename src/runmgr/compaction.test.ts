import { describe, expect, it } from 'vitest'
import type { TranscriptRow } from '../store/index.js'
import { planCompaction, renderForSummary } from './compaction.js'

// Where context compaction cuts (docs/guides/agent-runs.md#context-compaction).
let counter = 0
const row = (role: TranscriptRow['role'], size = 100): TranscriptRow => ({
  id: String(++counter).padStart(8, '0'),
  role,
  content: `${role} ${counter}`,
  toolCalls: role === 'assistant' ? [{ callId: 'c', providerCallId: 'c', name: 'rdm__ping', arguments: '{}' }] : null,
  toolCallId: role === 'tool' ? 'c' : null,
  status: 'completed',
  size,
})
/** `turns` turns of a question, a tool call, its result and an answer. */
const turns = (count: number) =>
  Array.from({ length: count }, () => [row('user'), row('assistant'), row('tool'), row('assistant')]).flat()
const settings = { threshold: 0.75, keepRecent: 0.25 }

describe('planCompaction', () => {
  it('leaves a transcript under the threshold alone', () => {
    expect(planCompaction(turns(2), 1000, settings)).toBeUndefined()
  })

  it('keeps the newest turns that fit, cut at the start of a turn', () => {
    const rows = turns(20) // 8,000 characters against a 1,000-token window (4,000 characters)
    const plan = planCompaction(rows, 1000, settings)!
    expect(plan.keep[0]!.role).toBe('user')
    expect(plan.keep.reduce((sum, kept) => sum + kept.size, 0)).toBeLessThanOrEqual(1000)
    expect([...plan.summarize, ...plan.keep]).toEqual(rows)
    // A tool result is never parted from its call.
    expect(plan.summarize.at(-1)!.role).toBe('assistant')
  })

  it('with no turn start in the kept part, keeps more rather than split a turn', () => {
    const rows = [...turns(1), row('user'), ...Array.from({ length: 40 }, (_, i) => row(i % 2 ? 'tool' : 'assistant'))]
    const plan = planCompaction(rows, 1000, settings)!
    expect(plan.keep[0]).toBe(rows[4])
    expect(plan.summarize).toEqual(rows.slice(0, 4))
  })

  it('forced: everything before the last turn; nothing when there is one turn only', () => {
    const rows = turns(3)
    expect(planCompaction(rows, 100_000, settings, true)!.keep).toEqual(rows.slice(8))
    expect(planCompaction(turns(1), 100_000, settings, true)).toBeUndefined()
  })
})

describe('renderForSummary', () => {
  it('keeps the newest lines within the budget and says how many were left out', () => {
    const text = renderForSummary(turns(50), 600)
    expect(text).toMatch(/^\[\d+ earlier messages left out\]/)
    expect(text.length).toBeLessThan(700)
    expect(text).toMatch(/Assistant: assistant \d+ \[called rdm__ping \{\}\]/)
  })
})
