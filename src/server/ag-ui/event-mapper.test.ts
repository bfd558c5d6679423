import { describe, expect, it } from 'vitest'
import type { EventRecord } from '../../store/index.js'
import { AgUiEventMapper, type AgUiEvent } from './event-mapper.js'

let id = 0
const record = (type: string, data: Record<string, unknown>): EventRecord => ({
  id: ++id,
  type,
  projectId: 'p',
  conversationId: 'c',
  runId: 'R',
  userId: 'u',
  data: data as EventRecord['data'],
  createdAt: new Date().toISOString(),
})
const types = (events: AgUiEvent[]): string[] => events.map((event) => event.type)
const setup = { threadId: 'c', runId: 'client-run', plinthRunId: 'R', model: 'm' }

describe('AgUiEventMapper', () => {
  it('ignores the run’s own user message and sends an assistant message that never streamed at once', () => {
    const mapper = new AgUiEventMapper(setup)
    expect(types(mapper.start())).toEqual(['RUN_STARTED'])
    expect(mapper.map(record('message.created', { messageId: 'user', role: 'user' }))).toEqual([])
    expect(
      mapper.map(
        record('message.completed', { messageId: 'user', content: 'hi', toolCalls: null, status: 'completed' }),
      ),
    ).toEqual([])
    expect(types(mapper.map(record('round.started', { runId: 'R', iteration: 1 })))).toEqual(['STEP_STARTED'])
    mapper.map(record('message.created', { messageId: 'a1', role: 'assistant' }))
    const whole = mapper.map(
      record('message.completed', { messageId: 'a1', content: 'all at once', toolCalls: null, status: 'completed' }),
    )
    expect(whole).toEqual([
      { type: 'TEXT_MESSAGE_START', messageId: 'a1', role: 'assistant' },
      { type: 'TEXT_MESSAGE_CONTENT', messageId: 'a1', delta: 'all at once' },
      { type: 'TEXT_MESSAGE_END', messageId: 'a1' },
    ])
  })

  it('a wait that lists only what this request answers is not an interrupt; a later one is', () => {
    const mapper = new AgUiEventMapper({ ...setup, continuesRound: 2, answering: new Set(['d1', 'c1']) })
    expect(mapper.start().at(-1)).toEqual({ type: 'STEP_STARTED', stepName: 'round 2' })
    const partial = { decisions: [], toolOutputs: [{ callId: 'c1', name: 'pick', args: {} }] }
    expect(
      mapper.map(record('run.status', { runId: 'R', status: 'requires_action', phase: null, requiredAction: partial })),
    ).toEqual([])
    expect(mapper.done).toBe(false)
    mapper.map(
      record('decision.required', {
        decisionId: 'd2',
        commandId: 'x.y',
        params: {},
        preview: 'Delete it?',
        risk: 'high',
        reasons: ['rule'],
        expiresAt: '2030-01-01T00:00:00.000Z',
      }),
    )
    const waiting = {
      decisions: [
        {
          decisionId: 'd2',
          callId: 'k2',
          name: 'x__y',
          commandId: 'x.y',
          risk: 'high',
          args: { a: 1 },
          kind: 'approve',
        },
      ],
      toolOutputs: [{ callId: 'c3', name: 'pick', args: {} }],
    }
    const finished = mapper.map(
      record('run.status', { runId: 'R', status: 'requires_action', phase: null, requiredAction: waiting }),
    )
    expect(types(finished)).toEqual(['STEP_FINISHED', 'RUN_FINISHED'])
    expect(finished.at(-1)).toMatchObject({
      runId: 'client-run',
      outcome: {
        type: 'interrupt',
        interrupts: [
          {
            id: 'd2',
            reason: 'tool_approval',
            toolCallId: 'k2',
            message: 'Delete it?',
            expiresAt: '2030-01-01T00:00:00.000Z',
            metadata: { plinth: { runId: 'R', risk: 'high', reasons: ['rule'] } },
          },
          { id: 'c3', reason: 'client_tool', toolCallId: 'c3' },
        ],
      },
    })
    expect(mapper.done).toBe(true)
    expect(mapper.map(record('run.completed', { runId: 'R', usage: { inputTokens: 1, outputTokens: 1 } }))).toEqual([])
  })

  it('reports only the tokens of its own model calls, skips results the client sent, and closes what is open on a failure', () => {
    const mapper = new AgUiEventMapper({
      ...setup,
      answeredByClient: new Set(['c1']),
      usageBefore: { inputTokens: 100, outputTokens: 10 },
    })
    mapper.start()
    expect(
      mapper.map(
        record('tool_call.completed', {
          callId: 'c1',
          status: 'ok',
          output: { color: 'red' },
          modelTruncated: false,
          durationMs: 1,
        }),
      ),
    ).toEqual([])
    mapper.map(record('round.started', { runId: 'R', iteration: 2 }))
    mapper.map(record('message.created', { messageId: 'a2', role: 'assistant' }))
    mapper.map(record('message.delta', { messageId: 'a2', text: 'Red' }))
    const failed = mapper.fail('shutdown', 'the server is shutting down')
    expect(types(failed)).toEqual(['TEXT_MESSAGE_END', 'STEP_FINISHED', 'RUN_ERROR'])
    const other = new AgUiEventMapper({ ...setup, usageBefore: { inputTokens: 100, outputTokens: 10 } })
    other.start()
    expect(
      other.map(record('run.completed', { runId: 'R', usage: { inputTokens: 150, outputTokens: 15 } })).at(-1),
    ).toMatchObject({ usage: [{ model: 'm', inputTokens: 50, outputTokens: 5, totalTokens: 55 }] })
  })
})
