import { describe, expect, it } from 'vitest'
import type { ModelMessage } from '../model.js'
import {
  convertToOpenAIMessages,
  convertToOpenAITools,
  openAIMessagesBytes,
  openAIToolsJson,
} from './convert-to-openai-messages.js'

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

describe('openAIToolsJson', () => {
  it('is the JSON of the converted tools, in order, the same each time', () => {
    const tools = [
      { name: 'a', description: 'd "quoted"', parameters: { type: 'object', properties: { x: { type: 'number' } } } },
      { name: 'b', description: '', parameters: { type: 'object' } },
    ]
    const json = openAIToolsJson(tools)
    expect(JSON.parse(json)).toEqual(convertToOpenAITools(tools))
    expect(openAIToolsJson(tools)).toBe(json)
    expect(JSON.parse(openAIToolsJson([tools[1]!]))).toEqual(convertToOpenAITools([tools[1]!]))
  })
})

describe('openAIMessagesBytes', () => {
  const json = (messages: ModelMessage[], options: { pdf?: boolean } = {}) =>
    Buffer.concat(openAIMessagesBytes(messages, options)).toString('utf8')

  it('is the JSON of the converted messages, each made once, a message with parts as it is now', () => {
    const messages: ModelMessage[] = [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'hi "there" — 你好 🌍' },
      { role: 'assistant', content: null, toolCalls: [{ id: 'p1', name: 'a', arguments: '{"x":1}' }] },
      { role: 'tool', toolCallId: 'p1', content: 'one' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'file', filename: 'a.pdf', mediaType: 'application/pdf', text: 'pdf text', data: 'JVBERi0=' },
        ],
      },
    ]
    for (const pdf of [false, true]) {
      expect(json(messages, { pdf })).toBe(JSON.stringify(convertToOpenAIMessages(messages, { pdf })))
      expect(json(messages, { pdf })).toBe(JSON.stringify(convertToOpenAIMessages(messages, { pdf })))
    }
    const parts = messages[4] as { content: Array<{ type: string; text?: string }> }
    parts.content[0]!.text = 'look again'
    expect(json(messages)).toBe(JSON.stringify(convertToOpenAIMessages(messages)))
    expect(json([])).toBe('[]')
  })
})
