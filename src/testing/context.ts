import type { Actor, CommandContext, KvStore, ProjectRef } from '../extension/index.js'
import { memoryLogger } from './memory-logger.js'

/** The project `context()` uses unless told otherwise. */
export const defaultProject: ProjectRef = { id: 'prj_1', ownerId: 'usr_owner', name: 'Demo project' }

/** What `context()` may be told; `user` is a shortcut for a user actor with that id. */
export interface ContextOptions extends Partial<CommandContext> {
  user?: string
}

/**
 * A CommandContext: by default the owner of `defaultProject`, clicking a button in it. Pass `user`
 * for another person, `actor` for the agent, `project: null` for a dispatch outside any project.
 */
export function context(kv: KvStore, options: ContextOptions = {}): CommandContext {
  const { user, ...rest } = options
  const actor: Actor =
    user === undefined
      ? { type: 'user', id: defaultProject.ownerId, onBehalfOf: defaultProject.ownerId }
      : { type: 'user', id: user, onBehalfOf: user }
  return {
    actor,
    entrance: 'button',
    project: defaultProject,
    conversationId: null,
    runId: null,
    signal: new AbortController().signal,
    kv,
    log: memoryLogger(),
    ...rest,
  }
}
