import { Type } from 'typebox'
import { describe, expect, it } from 'vitest'
import type { Run as RunRecord } from '../store/index.js'
import { Run, runView } from './run.js'
import { viewOf } from './view-of.js'

const record: RunRecord = {
  id: '01JRUN0000000000000000000A',
  conversationId: '01JCONV000000000000000000A',
  projectId: '01JPROJ000000000000000000A',
  ownerId: '01JUSER000000000000000000A',
  model: 'small',
  status: 'requires_action',
  phase: null,
  iteration: 2,
  maxIterations: 10,
  approvalPolicy: 'ask',
  clientTools: [{ name: 'pick' }],
  requiredAction: { decisions: [], toolOutputs: [{ callId: 'c1', name: 'pick', args: {} }] },
  error: null,
  usage: { inputTokens: 12, outputTokens: 3, cachedInputTokens: 0, reasoningTokens: 0, modelCalls: 1, cost: null },
  budget: { maxModelCalls: 5 },
  cancelReason: null,
  createdAt: '2026-01-02T03:04:05.000Z',
  updatedAt: '2026-01-02T03:04:06.000Z',
  startedAt: '2026-01-02T03:04:05.000Z',
  endedAt: null,
  knowledge: { autoInject: false },
  profile: { systemPrompt: 'be brief', modelParams: { temperature: 0.2 }, tools: null },
  leaseOwner: 'instance.1',
  leaseExpiresAt: '2026-01-02T03:05:05.000Z',
  resumes: 1,
  waitingSince: '2026-01-02T03:04:06.000Z',
  queuedFor: null,
  output: null,
  outputRepair: null,
}

describe('runView', () => {
  it('renders exactly the schema’s properties, in its order (the JSON the API, run.created and webhooks send)', () => {
    expect(JSON.stringify(runView(record))).toBe(
      '{"id":"01JRUN0000000000000000000A","conversationId":"01JCONV000000000000000000A","projectId":"01JPROJ000000000000000000A","model":"small","status":"requires_action","phase":null,"iteration":2,"maxIterations":10,"approvalPolicy":"ask","modelParams":{"temperature":0.2},"requiredAction":{"decisions":[],"toolOutputs":[{"callId":"c1","name":"pick","args":{}}]},"error":null,"usage":{"inputTokens":12,"outputTokens":3,"cachedInputTokens":0,"reasoningTokens":0,"modelCalls":1,"cost":null},"budget":{"maxModelCalls":5},"cancelReason":null,"output":null,"queue":null,"createdAt":"2026-01-02T03:04:05.000Z","updatedAt":"2026-01-02T03:04:06.000Z","startedAt":"2026-01-02T03:04:05.000Z","endedAt":null}',
    )
    expect(Object.keys(runView(record))).toEqual(Object.keys(Run.properties))
  })

  it('takes a property the record has under the schema’s name without being told; one it lacks must be derived', () => {
    const Small = Type.Object({ id: Type.String(), owner: Type.String() })
    const view = viewOf<RunRecord, typeof Small>(Small, { owner: (run) => run.ownerId })
    expect(view(record)).toEqual({ id: record.id, owner: record.ownerId })
    // @ts-expect-error `owner` is not a property of the record: it must be derived.
    viewOf<RunRecord, typeof Small>(Small, {})
  })
})
