import type { KvStore, ProjectAction, ProjectAuthzAdapter } from '../../src/extension/index.js'

/** kv key prefix of the member tables: `members:<projectId>` holds a string array of user ids. */
export const MEMBERS_PREFIX = 'members:'

/** Every action a listed member may take on a shared project. */
const MEMBER_ACTIONS: ReadonlySet<ProjectAction> = new Set<ProjectAction>([
  'read',
  'search',
  'create_conversation',
  'write',
])

export function membersKey(projectId: string): string {
  return `${MEMBERS_PREFIX}${projectId}`
}

/** Keeps only string entries, so a hand-edited or corrupt value never grants anything by accident. */
function asMembers(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((entry): entry is string => typeof entry === 'string') : []
}

/** The member table of one project (empty when there is none). */
export async function readMembers(kv: KvStore, projectId: string): Promise<string[]> {
  return asMembers(await kv.get(membersKey(projectId)))
}

/**
 * Changes the table in one step (`kv.update`: two owners' changes at once both land), stored sorted and
 * deduplicated; an empty table is deleted rather than kept. Resolves to the table before and after.
 */
export async function changeMembers(
  kv: KvStore,
  projectId: string,
  change: (members: string[]) => readonly string[],
): Promise<{ before: string[]; after: string[] }> {
  let before: string[] = []
  const stored = await kv.update(membersKey(projectId), (current) => {
    before = asMembers(current)
    const table = [...new Set(change(before))].sort()
    return table.length === 0 ? undefined : table
  })
  return { before, after: asMembers(stored) }
}

/**
 * The ProjectAuthz adapter backed by the member table: a listed member may do every action on the
 * project. Reads the table on every call, so a removal takes effect on the next request.
 */
export function createMemberAuthz(kv: KvStore): ProjectAuthzAdapter {
  return {
    async canAccessProject(actorId: string, projectId: string, action: ProjectAction): Promise<boolean> {
      if (!MEMBER_ACTIONS.has(action)) return false
      return (await readMembers(kv, projectId)).includes(actorId)
    },
    async listSharedProjects(actorId: string): Promise<string[]> {
      const shared: string[] = []
      for (const { key, value } of await kv.list(MEMBERS_PREFIX)) {
        // The prefix filter is the store's; check it again rather than trust how it compares keys.
        if (!key.startsWith(MEMBERS_PREFIX)) continue
        const projectId = key.slice(MEMBERS_PREFIX.length)
        if (projectId && asMembers(value).includes(actorId)) shared.push(projectId)
      }
      return shared
    },
  }
}
