import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConversation, createProject, createUser, newId, type Store } from '../src/store/index.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { ledgerViolations } from './helpers/ledger.js'
import { testDb } from '../src/store/test-access.js'

// Every test server checks the ledger invariant when it closes (helpers/test-server.ts); this shows
// that check finds what it is there to find.
const engine = testEngines()[0]!

describe(`the ledger invariant check (${engine})`, () => {
  let store: Store
  let conversationId: string

  beforeAll(async () => {
    store = await openTestStore(engine)
    const user = await createUser(store, 'ledger')
    if ('error' in user) throw new Error('unexpected')
    const project = await store.transaction((tx) => createProject(tx, user.id, { name: 'ledger' }))
    const conversation = await store.transaction((tx) =>
      createConversation(tx, { projectId: project.id, ownerId: user.id }),
    )
    conversationId = conversation.id
  })
  afterAll(async () => store?.close())

  const message = (fields: { role: 'assistant' | 'tool'; toolCalls?: string[]; toolCallId?: string }) => ({
    id: newId(),
    conversation_id: conversationId,
    run_id: null,
    role: fields.role,
    content: '',
    status: 'completed',
    tool_calls: fields.toolCalls
      ? JSON.stringify(
          fields.toolCalls.map((callId) => ({ callId, providerCallId: callId, name: 'x', arguments: '{}' })),
        )
      : null,
    tool_call_id: fields.toolCallId ?? null,
  })

  it('holds for a call with its one result, and names an unanswered call, a second answer and a stray result', async () => {
    await testDb(store)
      .insertInto('messages')
      .values([message({ role: 'assistant', toolCalls: ['c1', 'c2'] }), message({ role: 'tool', toolCallId: 'c1' })])
      .execute()
    expect(await ledgerViolations(store)).toEqual([`conversation ${conversationId}: call c2 never answered`])
    await testDb(store)
      .insertInto('messages')
      .values([
        message({ role: 'tool', toolCallId: 'c2' }),
        message({ role: 'tool', toolCallId: 'c2' }),
        message({ role: 'tool', toolCallId: 'c9' }),
      ])
      .execute()
    expect(await ledgerViolations(store)).toEqual([
      `conversation ${conversationId}: call c2 answered twice`,
      `conversation ${conversationId}: result for c9 without an earlier call`,
    ])
  })
})
