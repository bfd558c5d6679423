import type { CommandCatalog, ProjectAccess } from '../cmdbus/index.js'
import type { ProjectAction } from '../extension/index.js'
import type { ModelRegistry } from '../llm/index.js'
import type { RunManager } from './run-manager.js'
import {
  appendAuditEntry,
  createProject,
  deleteProject,
  getProject,
  listProjects,
  liveProjectIdsOwnedBy,
  notFoundError,
  RequestError,
  setProjectQuota,
  updateProject,
  type AgentProfile,
  type Executor,
  type JsonValue,
  type Page,
  type PageRequest,
  type Project,
  type ProjectInput,
  type ProjectQuota,
  type Store,
  type User,
} from '../store/index.js'

type ProfileInput = Partial<AgentProfile> & { runtimes?: string[] }

/** A project as the API takes it: `null` resets these fields to their defaults, as it clears the others. */
export type ProjectRequest = Omit<ProjectInput, 'modelParams' | 'injectMemberKnowledge' | 'memoryRecall'> & {
  modelParams?: ProjectInput['modelParams'] | null
  injectMemberKnowledge?: boolean | null
  memoryRecall?: boolean | null
}

function withDefaults<T extends Partial<ProjectRequest>>(
  input: T,
): Omit<T, 'modelParams' | 'injectMemberKnowledge' | 'memoryRecall'> & Partial<ProjectInput> {
  const { modelParams, injectMemberKnowledge, memoryRecall, ...rest } = input
  return {
    ...rest,
    ...(modelParams !== undefined && { modelParams: modelParams ?? {} }),
    ...(injectMemberKnowledge !== undefined && { injectMemberKnowledge: injectMemberKnowledge ?? false }),
    ...(memoryRecall !== undefined && { memoryRecall: memoryRecall ?? true }),
  }
}

// What the audit log records changes of: the agent's profile, and what its runs may spend.
const profileKeys = [
  'systemPrompt',
  'defaultModel',
  'modelParams',
  'tools',
  'injectMemberKnowledge',
  'memoryRecall',
  'budget',
  'retention',
] as const

/** Profile fields only the project's owner may change (a member with write access gets 403). */
const ownerOnlyFields = ['retention', 'budget', 'injectMemberKnowledge'] as const

export interface ProjectServiceDeps {
  store: Store
  access: ProjectAccess
  models: ModelRegistry
  catalog: CommandCatalog
  /** Names of the runtime directories the operator declares. */
  runtimes: () => readonly string[]
  /** Ends the runs of a deleted project. */
  runs?: Pick<RunManager, 'endRunsOf' | 'dropDeletedWork'>
}

/**
 * Projects as a caller sees them. Whatever the caller may not see is `not_found`, exactly like a
 * project that does not exist, so ids cannot be probed; sharing comes from the ProjectAuthz adapter.
 * A change of agent profile is audited (hash-chained with every dispatch).
 */
export class ProjectService {
  readonly #deps: ProjectServiceDeps

  constructor(deps: ProjectServiceDeps) {
    this.#deps = deps
  }

  /** A live project `user` may perform `action` on. */
  async resolve(user: User, projectId: string, action: ProjectAction = 'read'): Promise<Project> {
    const { access } = this.#deps
    const project = await access.project(user.id, projectId, 'read')
    if (!project) throw notFoundError('project')
    if (action !== 'read' && project.ownerId !== user.id && !(await access.project(user.id, projectId, action))) {
      throw new RequestError('forbidden', `not allowed to ${action.replace('_', ' ')} in this project`)
    }
    return project
  }

  /** A project `user` owns: only the owner may delete it or manage it as a whole. */
  async owned(user: User, projectId: string): Promise<Project> {
    const project = await this.resolve(user, projectId)
    if (project.ownerId !== user.id) throw new RequestError('forbidden', 'only the project owner may do this')
    return project
  }

  /** The projects the user owns and those shared with them, newest first. */
  async list(user: User, page: PageRequest): Promise<Page<Project>> {
    const shared = await this.#deps.access.sharedProjectIds(user.id)
    return listProjects(this.#deps.store, user.id, page, shared)
  }

  /** Live projects the user owns, and those shared with them. */
  async visibleIds(userId: string): Promise<string[]> {
    const owned = await liveProjectIdsOwnedBy(this.#deps.store, userId)
    const shared = await this.#deps.access.sharedProjectIds(userId)
    return [...new Set([...owned, ...shared])]
  }

  /** Creates a project in `tx` (the caller's transaction: it may also record an idempotent answer). */
  create(tx: Executor, user: User, input: ProjectRequest): Promise<Project> {
    return createProject(tx, user.id, this.checkProfile(withDefaults(input) as ProjectInput))
  }

  async update(user: User, projectId: string, request: Partial<ProjectRequest>): Promise<Project> {
    const patch = withDefaults(request)
    const project = await this.resolve(user, projectId, 'write')
    // What protects the owner is the owner's to change: retention deletes history, a budget spends the
    // owner's money, and injectMemberKnowledge puts members' items into the owner's prompts.
    if (project.ownerId !== user.id)
      for (const field of ownerOnlyFields)
        if (patch[field] !== undefined)
          throw new RequestError('forbidden', `only the project owner may change the project's ${field}`)
    const checked = this.checkProfile(patch)
    return this.#deps.store.transaction(async (tx) => {
      const next = await updateProject(tx, project, checked)
      await auditProfileChange(tx, project, next, user.id)
      return next
    })
  }

  /** The operator sets (null: removes) a project's own run quota (docs/guides/operating.md#run-quotas). */
  async setQuota(projectId: string, quota: ProjectQuota | null): Promise<Project> {
    const { store } = this.#deps
    if (!(await setProjectQuota(store, projectId, quota))) throw notFoundError('project')
    const project = await getProject(store, projectId)
    if (!project) throw notFoundError('project')
    return project
  }

  /** Deletes a project of the caller's (soft: history is kept; its conversations' work files go). */
  async remove(user: User, projectId: string): Promise<Project> {
    const project = await this.owned(user, projectId)
    await this.#deps.store.transaction((tx) => deleteProject(tx, project))
    await this.#deps.runs?.endRunsOf({ projectId: project.id }, 'project_deleted')
    await this.#deps.runs?.dropDeletedWork({ projectId: project.id })
    return project
  }

  /**
   * Checks what a schema cannot: the default model is configured, every tool names an exposed command
   * (by id or tool name; stored as command ids), every runtime is declared. Returns the input with
   * tools as command ids.
   */
  checkProfile<T extends ProfileInput>(input: T): T {
    const { models, catalog, runtimes } = this.#deps
    if (typeof input.defaultModel === 'string' && !models.get(input.defaultModel)) {
      throw new RequestError(
        'unknown_model',
        `body.defaultModel: no model ${JSON.stringify(input.defaultModel)}; GET /api/models lists them`,
      )
    }
    const declared = runtimes()
    const unknownRuntimes = (input.runtimes ?? []).filter((name) => !declared.includes(name))
    if (unknownRuntimes.length > 0) {
      throw new RequestError(
        'validation_failed',
        `body.runtimes: unknown runtime ${unknownRuntimes.join(', ')} (the operator declares them in exec.runtimes${declared.length > 0 ? `: ${declared.join(', ')}` : '; none are declared'})`,
        [{ path: 'body.runtimes', message: `unknown runtime ${unknownRuntimes.join(', ')}` }],
      )
    }
    if (!input.tools) return input
    const exposed = catalog
      .list()
      .filter((command) => command.toolName && (!command.spec.entrances || command.spec.entrances.includes('agent')))
    const errors: Array<{ path: string; message: string }> = []
    const ids = input.tools.map((name, index) => {
      const command = exposed.find((candidate) => candidate.spec.id === name || candidate.toolName === name)
      if (!command) errors.push({ path: `body.tools.${index}`, message: `unknown tool ${JSON.stringify(name)}` })
      return command?.spec.id ?? name
    })
    if (errors.length > 0) {
      throw new RequestError(
        'validation_failed',
        `${errors.map((error) => `${error.path}: ${error.message}`).join('; ')} (GET /api/commands lists the commands; those with exposeAsTool are tools)`,
        errors,
      )
    }
    return { ...input, tools: [...new Set(ids)] }
  }
}

/** Appends a profile change to the audit log when one was made. */
async function auditProfileChange(tx: Executor, before: Project, after: Project, by: string): Promise<void> {
  const changes: { [key: string]: JsonValue } = {}
  for (const key of profileKeys) {
    if (JSON.stringify(before[key]) !== JSON.stringify(after[key]))
      changes[key] = { from: before[key] as JsonValue, to: after[key] as JsonValue }
  }
  if (Object.keys(changes).length === 0) return
  await appendAuditEntry(tx, {
    dispatchId: null,
    step: 'project:profile',
    ownerId: before.ownerId,
    projectId: before.id,
    conversationId: null,
    commandId: null,
    entrance: null,
    envelope: { projectId: before.id, by, changes },
  })
}
