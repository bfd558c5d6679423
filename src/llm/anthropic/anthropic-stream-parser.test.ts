import { describe, expect, it } from 'vitest'
import { AnthropicStreamParser } from './anthropic-stream-parser.js'

describe('AnthropicStreamParser', () => {
  it('uses the SSE event name when data has no type, and the start block input when no deltas follow', () => {
    const parser = new AnthropicStreamParser()
    parser.push({ message: { usage: { input_tokens: 3 } } }, 'message_start')
    parser.push({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { id: 7 } },
    })
    parser.push({ type: 'content_block_stop', index: 0 })
    expect(parser.isComplete).toBe(false)
    parser.push({ type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 9 } })
    expect(parser.isComplete).toBe(true)
    expect(parser.isStopped).toBe(false)
    parser.push({ type: 'message_stop' })
    expect(parser.isStopped).toBe(true)
    expect(parser.finish()).toEqual([
      { type: 'tool-call', call: { id: 'toolu_1', name: 'lookup', arguments: '{"id":7}' } },
      { type: 'usage', usage: { inputTokens: 3, outputTokens: 9 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('ignores deltas for unknown blocks and unknown events, and keeps stop reasons it does not know', () => {
    const parser = new AnthropicStreamParser()
    expect(
      parser.push({ type: 'content_block_delta', index: 5, delta: { type: 'input_json_delta', partial_json: '{}' } }),
    ).toEqual([])
    expect(parser.push({ type: 'something_new', payload: 1 })).toEqual([])
    expect(parser.push(null)).toEqual([])
    parser.push({ type: 'message_delta', delta: { stop_reason: 'refusal' } })
    expect(parser.finish()).toEqual([{ type: 'finish', reason: 'refusal' }])
  })
})
