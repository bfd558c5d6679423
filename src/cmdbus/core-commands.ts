import type { JsonValue } from '../extension/index.js'
import { listProjects, type Store } from '../store/index.js'
import type { CommandCatalog } from './command-catalog.js'
import type { ProjectAccess } from './project-access.js'

/** Built-in commands: the `core.` namespace, registered through the same catalog as any plugin. */
export function registerCoreCommands(catalog: CommandCatalog, deps: { store: Store; access: ProjectAccess; version: string }): void {
  const staged = catalog.stage('core', deps.version)
  staged.registry.addCommand(
    {
      id: 'core.list_projects',
      title: 'List projects',
      description: 'Lists the projects the user owns or that are shared with them (at most 50, newest first).',
      paramsSchema: { type: 'object', properties: {}, additionalProperties: false },
      risk: 'low',
      idempotent: true,
      exposeAsTool: { name: 'list_projects' },
    },
    async (_params, context) => {
      const userId = context.actor.onBehalfOf
      const shared = await deps.access.sharedProjectIds(userId)
      const page = await listProjects(deps.store.db, userId, { limit: 50 }, shared)
      const projects: JsonValue[] = page.items.map((project) => ({
        id: project.id,
        name: project.name,
        description: project.description,
        shared: project.ownerId !== userId,
      }))
      return { projects }
    },
  )
  staged.commit()
}
