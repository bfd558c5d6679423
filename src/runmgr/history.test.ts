import { describe, expect, it } from 'vitest'
import type { ModelMessage } from '../llm/index.js'
import type { TranscriptMessage } from '../store/index.js'
import { buildModelMessages, estimateTokens, trimToBudget } from './history.js'

const message = (partial: Partial<TranscriptMessage> & Pick<TranscriptMessage, 'role'>): TranscriptMessage => ({
  id: Math.random().toString(36),
  content: null,
  toolCalls: null,
  toolCallId: null,
  status: 'completed',
  ...partial,
})

describe('buildModelMessages', () => {
  it('sends a model without vision the earlier messages’ images as a note; the run’s own input as it is', () => {
    const image = {
      type: 'image' as const,
      mediaType: 'image/png',
      path: '.inputs/a.png',
      width: 1,
      height: 1,
      bytes: 68,
    }
    const transcript = [
      message({ role: 'user', content: 'look', parts: [{ type: 'text', text: 'look' }, image] }),
      message({ role: 'assistant', content: 'a cat' }),
      message({ role: 'user', content: 'and this?', parts: [{ type: 'text', text: 'and this?' }, image] }),
    ]
    const [earlier, , latest] = buildModelMessages(transcript, { vision: false })
    expect(earlier).toEqual({
      role: 'user',
      content: [
        { type: 'text', text: 'look' },
        { type: 'text', text: '[image .inputs/a.png: not shown, this model does not take images]' },
      ],
    })
    // The run's own images are the fallback chain's to place (a model with vision, or 400 before the run).
    expect(latest).toEqual({
      role: 'user',
      content: [
        { type: 'text', text: 'and this?' },
        { type: 'image', mediaType: 'image/png', path: '.inputs/a.png' },
      ],
    })
    expect(buildModelMessages(transcript, { vision: true })[0]).toMatchObject({
      content: [{ type: 'text' }, { type: 'image', path: '.inputs/a.png' }],
    })
  })

  it('places each tool result right after its call and sends the provider call id upstream', () => {
    const out = buildModelMessages([
      message({ role: 'user', content: 'hi' }),
      message({
        role: 'assistant',
        content: '',
        toolCalls: [
          { callId: 'c1', providerCallId: 'p1', name: 'a', arguments: '{}' },
          { callId: 'c2', providerCallId: 'p2', name: 'b', arguments: '{}' },
        ],
      }),
      message({ role: 'tool', toolCallId: 'c2', content: 'two' }),
      message({ role: 'tool', toolCallId: 'c1', content: 'one' }),
      message({ role: 'assistant', content: 'done' }),
    ])
    expect(out).toEqual([
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: null,
        toolCalls: [
          { id: 'p1', name: 'a', arguments: '{}' },
          { id: 'p2', name: 'b', arguments: '{}' },
        ],
      },
      { role: 'tool', toolCallId: 'p1', content: 'one' },
      { role: 'tool', toolCallId: 'p2', content: 'two' },
      { role: 'assistant', content: 'done' },
    ])
  })

  it('repairs an unanswered call with an interrupted result and drops results without a call', () => {
    const out = buildModelMessages([
      message({ role: 'user', content: 'hi' }),
      message({
        role: 'assistant',
        content: 'x',
        toolCalls: [{ callId: 'c1', providerCallId: 'p1', name: 'a', arguments: '{}' }],
      }),
      message({ role: 'tool', toolCallId: 'orphan', content: 'stray' }),
    ])
    expect(out).toHaveLength(3)
    expect(out[2]).toMatchObject({ role: 'tool', toolCallId: 'p1' })
    expect(JSON.parse((out[2] as { content: string }).content).error.code).toBe('interrupted')
    expect(JSON.stringify(out)).not.toContain('stray')
  })

  it('leaves out turns still streaming or cut off by a failure or crash', () => {
    const out = buildModelMessages([
      message({ role: 'user', content: 'hi' }),
      message({ role: 'assistant', content: 'half', status: 'failed' }),
      message({ role: 'assistant', content: 'half', status: 'interrupted' }),
      message({ role: 'assistant', content: 'now', status: 'streaming' }),
      message({ role: 'assistant', content: 'kept', status: 'cancelled' }),
    ])
    expect(out).toEqual([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'kept' },
    ])
  })
})

describe('trimToBudget', () => {
  const long = 'x'.repeat(2000)
  const history: ModelMessage[] = [
    { role: 'user', content: long },
    { role: 'assistant', content: long },
    { role: 'user', content: long },
    { role: 'assistant', content: null, toolCalls: [{ id: 'p1', name: 'a', arguments: '{}' }] },
    { role: 'tool', toolCallId: 'p1', content: long },
    { role: 'assistant', content: long },
    { role: 'user', content: 'q1' },
    { role: 'assistant', content: 'a1' },
    { role: 'user', content: 'q2' },
    { role: 'assistant', content: 'a2' },
    { role: 'user', content: 'q3' },
    { role: 'assistant', content: 'a3' },
  ]

  it('keeps everything within budget', () => {
    expect(trimToBudget(history, estimateTokens(history))).toBe(history)
  })

  it('drops the oldest whole turns, never splitting a call from its results, and keeps the latest 6 messages', () => {
    const trimmed = trimToBudget(history, 300)
    expect(trimmed.slice(-6)).toEqual(history.slice(-6))
    expect(trimmed[0]?.role).toBe('user')
    for (const [index, item] of trimmed.entries()) {
      if (item.role === 'tool')
        expect(trimmed[index - 1]?.role === 'assistant' || trimmed[index - 1]?.role === 'tool').toBe(true)
    }
    expect(trimmed.length).toBeLessThan(history.length)
  })

  it('never drops below the latest 6 messages even when they alone exceed the budget', () => {
    const trimmed = trimToBudget(history, 1)
    expect(trimmed.length).toBeGreaterThanOrEqual(6)
    expect(trimmed.slice(-6)).toEqual(history.slice(-6))
  })

  it('keeps the question of a turn whose earlier rounds it drops', () => {
    // One question, then rounds of three parallel calls each: the turn alone is over the budget.
    const round = (n: number): ModelMessage[] => [
      {
        role: 'assistant',
        content: null,
        toolCalls: [0, 1, 2].map((index) => ({ id: `r${n}c${index}`, name: 'a', arguments: '{}' })),
      },
      ...[0, 1, 2].map((index) => ({ role: 'tool' as const, toolCallId: `r${n}c${index}`, content: long })),
    ]
    const turn: ModelMessage[] = [
      { role: 'user', content: 'old question' },
      { role: 'assistant', content: 'old answer' },
      { role: 'user', content: 'the question' },
      ...[1, 2, 3, 4, 5, 6].flatMap(round),
    ]
    const trimmed = trimToBudget(turn, 3000)
    expect(trimmed.length).toBeLessThan(turn.length)
    expect(trimmed[0]).toEqual({ role: 'user', content: 'the question' })
    expect(trimmed[1]?.role).toBe('assistant')
    expect(trimmed.slice(-8)).toEqual(turn.slice(-8))
    expect(trimToBudget(turn, 1)[0]).toEqual({ role: 'user', content: 'the question' })
    // Rounds whose results name images (a vision model): the images' message is no question.
    const withImages: ModelMessage[] = [
      { role: 'user', content: 'the question' },
      ...[1, 2, 3, 4, 5, 6].flatMap((n) => [
        ...round(n),
        {
          role: 'user' as const,
          content: [
            { type: 'text' as const, text: 'The images the tool results above refer to:' },
            { type: 'image' as const, mediaType: 'image/png', path: `plot${n}.png` },
          ],
        },
      ]),
    ]
    const trimmedImages = trimToBudget(withImages, 3000)
    expect(trimmedImages.length).toBeLessThan(withImages.length)
    expect(trimmedImages[0]).toEqual({ role: 'user', content: 'the question' })
    expect(trimmedImages[1]?.role).toBe('assistant')
  })
})

describe('a window kept from round to round', () => {
  const turn = () => {
    const call = message({
      role: 'assistant',
      content: '',
      toolCalls: [{ callId: 'c1', providerCallId: 'p1', name: 'a', arguments: '{}' }],
    })
    return [
      message({ role: 'user', content: 'hi' }),
      call,
      message({ role: 'tool', toolCallId: 'c1', content: 'one' }),
      message({ role: 'assistant', content: 'done' }),
    ]
  }

  it('gives the same rows the same messages again, built once, and rebuilds a turn whose results are other rows', () => {
    const rows = turn()
    const first = buildModelMessages(rows)
    const again = buildModelMessages([...rows, message({ role: 'user', content: 'and now?' })])
    expect(again.slice(0, first.length)).toEqual(first)
    first.forEach((built, index) => expect(again[index]).toBe(built))
    // The call's result is another row now (say, read again after a resume): the turn is built anew.
    const answered = [rows[0]!, rows[1]!, message({ role: 'tool', toolCallId: 'c1', content: 'uno' }), rows[3]!]
    const rebuilt = buildModelMessages(answered)
    expect(rebuilt[2]).toEqual({ role: 'tool', toolCallId: 'p1', content: 'uno' })
    expect(rebuilt[1]).not.toBe(first[1])
    expect(rebuilt[0]).toBe(first[0])
  })

  it('builds a message with parts anew each time (its images get their bytes in place)', () => {
    const rows = [
      message({
        role: 'user',
        content: 'see',
        parts: [{ type: 'image', mediaType: 'image/png', path: 'a.png', width: 1, height: 1, bytes: 68 }],
      }),
    ]
    const first = buildModelMessages(rows)
    const again = buildModelMessages(rows)
    expect(again).toEqual(first)
    expect(again[0]).not.toBe(first[0])
  })

  it('estimates from each message’s JSON exactly as from the whole prompt’s, also after a message with parts changed', () => {
    const messages: ModelMessage[] = [
      ...buildModelMessages(turn()),
      { role: 'user', content: [{ type: 'image', mediaType: 'image/png', path: 'a.png' }] },
    ]
    const whole = (list: ModelMessage[]) => Math.ceil(JSON.stringify(list).length / 4)
    expect(estimateTokens([])).toBe(whole([]))
    expect(estimateTokens(messages)).toBe(whole(messages))
    expect(estimateTokens(messages)).toBe(whole(messages))
    const withParts = messages.at(-1) as { content: Array<{ data?: string }> }
    withParts.content[0]!.data = 'x'.repeat(400)
    expect(estimateTokens(messages)).toBe(whole(messages))
  })
})
