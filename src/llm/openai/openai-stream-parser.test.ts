import { describe, expect, it } from 'vitest'
import { ModelError } from '../model.js'
import { OpenAIStreamParser } from './openai-stream-parser.js'

function delta(value: object, finishReason: string | null = null): object {
  return { choices: [{ index: 0, delta: value, finish_reason: finishReason }] }
}

describe('OpenAIStreamParser', () => {
  it('emits text right away and holds tool calls, usage and finish for the end', () => {
    const parser = new OpenAIStreamParser()
    expect(parser.push(delta({ role: 'assistant', content: '' }))).toEqual([])
    expect(parser.push(delta({ content: 'Hel' }))).toEqual([{ type: 'text-delta', text: 'Hel' }])
    expect(
      parser.push(
        delta({ tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'a', arguments: '{"x"' } }] }),
      ),
    ).toEqual([])
    expect(parser.push(delta({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }, 'tool_calls'))).toEqual([])
    expect(parser.push({ choices: [], usage: { prompt_tokens: 4, completion_tokens: 2 } })).toEqual([])
    expect(parser.finish()).toEqual([
      { type: 'tool-call', call: { id: 'c1', name: 'a', arguments: '{"x":1}' } },
      { type: 'usage', usage: { inputTokens: 4, outputTokens: 2 } },
      { type: 'finish', reason: 'tool_calls' },
    ])
  })

  it('keeps id and name from the first fragment even when later fragments repeat or blank them', () => {
    const parser = new OpenAIStreamParser()
    parser.push(delta({ tool_calls: [{ index: 1, id: 'second', function: { name: 'b', arguments: '' } }] }))
    parser.push(delta({ tool_calls: [{ index: 0, id: 'first', function: { name: 'a', arguments: '{' } }] }))
    parser.push(
      delta({
        tool_calls: [
          { index: 1, id: '', function: { name: '', arguments: '[]' } },
          { index: 0, id: 'other', function: { name: 'zzz', arguments: '}' } },
        ],
      }),
    )
    expect(parser.finish()).toEqual([
      { type: 'tool-call', call: { id: 'first', name: 'a', arguments: '{}' } },
      { type: 'tool-call', call: { id: 'second', name: 'b', arguments: '[]' } },
      { type: 'finish', reason: null },
    ])
  })

  it('drops a call that never got a name and invents an id for one that never got an id', () => {
    const parser = new OpenAIStreamParser()
    parser.push(
      delta({
        tool_calls: [
          { index: 0, function: { arguments: '{}' } },
          { index: 1, function: { name: 'b', arguments: '{}' } },
        ],
      }),
    )
    expect(parser.finish()).toEqual([
      { type: 'tool-call', call: { id: 'call_1', name: 'b', arguments: '{}' } },
      { type: 'finish', reason: null },
    ])
  })

  it('ignores other choices, nulls and shapes it does not know', () => {
    const parser = new OpenAIStreamParser()
    for (const chunk of [
      null,
      42,
      'text',
      [],
      { choices: null },
      { choices: [{ index: 1, delta: { content: 'other choice' } }] },
      { usage: null, choices: [{ delta: null }] },
      { choices: [{ delta: { tool_calls: 'x' } }] },
    ]) {
      expect(parser.push(chunk)).toEqual([])
    }
    expect(parser.finish()).toEqual([{ type: 'finish', reason: null }])
  })

  it('throws a retryable ModelError for an error chunk', () => {
    const parser = new OpenAIStreamParser()
    expect(() => parser.push({ error: { message: 'boom' } })).toThrow(ModelError)
    try {
      parser.push({ error: 'plain' })
    } catch (error) {
      expect(error).toMatchObject({ code: 'upstream_error', isRetryable: true })
    }
  })
})
