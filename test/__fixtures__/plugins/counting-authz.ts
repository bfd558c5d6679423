import { definePlugin } from '../../../src/extension/index.js'

/** Records every question the ProjectAuthz adapter is asked (on globalThis, so a test in the same process reads it); grants nothing. */
export const calls: Array<{ actorId: string; projectId: string }> = ((globalThis as { __countingAuthzCalls?: Array<{ actorId: string; projectId: string }> }).__countingAuthzCalls ??= [])

export default definePlugin({
  name: 'counting-authz',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.registerProjectAuthz({
      canAccessProject(actorId, projectId) {
        calls.push({ actorId, projectId })
        return false
      },
      listSharedProjects: () => [],
    })
  },
})
