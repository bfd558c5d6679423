import {
  createConversation,
  createProject,
  createUser,
  type NewRun,
  type Run,
  type Store,
} from '../../src/store/index.js'
import { runView } from '../../src/resources/index.js'

/** Where a store-level test puts its conversations and runs. */
export interface SeedScope {
  ownerId: string
  projectId: string
}

/** A new user (named `name`) and a project of theirs. */
export async function seedProject(store: Store, name: string): Promise<SeedScope> {
  const user = await createUser(store, name)
  if ('error' in user) throw new Error(`could not create user ${name}`)
  const project = await store.transaction((tx) => createProject(tx, user.id, { name }))
  return { ownerId: user.id, projectId: project.id }
}

/** A user message's run in a new conversation of the scope, as `store.createRun` takes it. */
export async function newRunInput(store: Store, scope: SeedScope): Promise<NewRun> {
  const conversationId = (await store.transaction((tx) => createConversation(tx, scope))).id
  return {
    conversationId,
    ...scope,
    model: 'm',
    maxIterations: 5,
    approvalPolicy: 'ask',
    clientTools: [],
    input: 'hi',
    view: runView,
  }
}

/** A run started alone in a new conversation of the scope: `running`, its lease held by `owner` for a minute. */
export async function startedRun(store: Store, scope: SeedScope, owner: string): Promise<Run> {
  const created = await store.createRun(await newRunInput(store, scope), {
    lease: { owner, expiresAt: new Date(Date.now() + 60_000) },
    allowQueue: false,
  })
  if (!('run' in created)) throw new Error('the conversation has an active run')
  return created.run
}
