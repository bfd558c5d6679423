import { CommandError, type CommandContext, type ProjectRef } from '../../src/extension/index.js'

/** The dispatch's project, or a `project_required` CommandError the caller can read. */
export function requireProject(context: CommandContext, commandId: string): ProjectRef {
  if (!context.project)
    throw new CommandError(
      'project_required',
      `${commandId} needs a project: dispatch it with a projectId or from a project conversation`,
    )
  return context.project
}

/** Throws `forbidden` unless the person behind the dispatch owns the project. */
export function requireOwner(context: CommandContext, project: ProjectRef): void {
  if (project.ownerId !== context.actor.onBehalfOf)
    throw new CommandError('forbidden', 'only the project owner manages members')
}
