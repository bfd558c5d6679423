import { describe, expect, it } from 'vitest'
import { convertToAnthropicMessages, convertToAnthropicTools, parseToolInput } from './convert-to-anthropic-messages.js'

describe('convertToAnthropicMessages', () => {
  it('moves system text apart, turns tool calls into tool_use and merges tool results (and a following user text) into one user message', () => {
    expect(
      convertToAnthropicMessages([
        { role: 'system', content: 'one' },
        { role: 'user', content: 'q' },
        { role: 'system', content: 'two' },
        {
          role: 'assistant',
          content: 'Looking.',
          toolCalls: [
            { id: 't1', name: 'a', arguments: '{"k":1}' },
            { id: 't2', name: 'b', arguments: '' },
          ],
        },
        { role: 'tool', toolCallId: 't1', content: 'r1' },
        { role: 'tool', toolCallId: 't2', content: 'r2' },
        { role: 'user', content: 'and?' },
        { role: 'assistant', content: null },
        { role: 'user', content: 'hello?' },
      ]),
    ).toEqual({
      system: 'one\n\ntwo',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'q' }] },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Looking.' },
            { type: 'tool_use', id: 't1', name: 'a', input: { k: 1 } },
            { type: 'tool_use', id: 't2', name: 'b', input: {} },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', content: 'r1' },
            { type: 'tool_result', tool_use_id: 't2', content: 'r2' },
            { type: 'text', text: 'and?' },
            // The empty assistant turn is dropped, so the next user text joins this message.
            { type: 'text', text: 'hello?' },
          ],
        },
      ],
    })
  })

  it('has no system without system messages', () => {
    expect(convertToAnthropicMessages([{ role: 'user', content: 'x' }]).system).toBeUndefined()
  })

  it('converts tools', () => {
    expect(convertToAnthropicTools([{ name: 'a', description: 'd', parameters: { type: 'object' } }])).toEqual([
      { name: 'a', description: 'd', input_schema: { type: 'object' } },
    ])
  })
})

describe('parseToolInput', () => {
  it('parses objects, unwraps a JSON string holding JSON once, and falls back to {}', () => {
    expect(parseToolInput('{"city":"Paris"}')).toEqual({ city: 'Paris' })
    expect(parseToolInput('"{\\"city\\":\\"Paris\\"}"')).toEqual({ city: 'Paris' })
    expect(parseToolInput('{"city": "Par')).toEqual({})
    expect(parseToolInput('[1,2]')).toEqual({})
    expect(parseToolInput('"just text"')).toEqual({})
    expect(parseToolInput('null')).toEqual({})
    expect(parseToolInput('')).toEqual({})
  })
})
