import { describe, expect, it } from 'vitest'
import { convertToOpenAIMessages, convertToOpenAITools } from './convert-to-openai-messages.js'

describe('convertToOpenAIMessages', () => {
  it('converts every role, with content null on a tool-only assistant turn and raw arguments', () => {
    expect(
      convertToOpenAIMessages([
        { role: 'system', content: 'sys' },
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'a', arguments: 'not json' }] },
        { role: 'tool', toolCallId: 'c1', content: 'error' },
        {
          role: 'assistant',
          content: 'Thinking aloud',
          toolCalls: [{ id: 'c2', name: 'b', arguments: '"{\\"k\\":1}"' }],
        },
        { role: 'tool', toolCallId: 'c2', content: 'ok' },
        { role: 'assistant', content: null },
        { role: 'assistant', content: 'done', toolCalls: [] },
      ]),
    ).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'a', arguments: 'not json' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'error' },
      {
        role: 'assistant',
        content: 'Thinking aloud',
        tool_calls: [{ id: 'c2', type: 'function', function: { name: 'b', arguments: '"{\\"k\\":1}"' } }],
      },
      { role: 'tool', tool_call_id: 'c2', content: 'ok' },
      { role: 'assistant', content: '' },
      { role: 'assistant', content: 'done' },
    ])
  })

  it('converts tools to functions', () => {
    expect(convertToOpenAITools([{ name: 'a', description: 'd', parameters: { type: 'object' } }])).toEqual([
      { type: 'function', function: { name: 'a', description: 'd', parameters: { type: 'object' } } },
    ])
  })
})
