import { definePlugin } from '../../../src/extension/index.js'

/** Read-only shares the test sets up (on globalThis, so a test in the same process writes them): `projectId` → reader ids. */
export const readOnlyShares: Map<string, Set<string>> = ((globalThis as { __readOnlyShares?: Map<string, Set<string>> }).__readOnlyShares ??= new Map())

/** Shares projects read-only: readers may see them and hold conversations there, never write. */
export default definePlugin({
  name: 'read-only-share',
  version: '1.0.0',
  surface: '^1.0.0',
  setup(registry) {
    registry.registerProjectAuthz({
      canAccessProject: (actorId, projectId, action) => (action === 'read' || action === 'create_conversation') && (readOnlyShares.get(projectId)?.has(actorId) ?? false),
      listSharedProjects: (actorId) => [...readOnlyShares].filter(([, readers]) => readers.has(actorId)).map(([projectId]) => projectId),
    })
  },
})
