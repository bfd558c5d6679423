import type { Host, Registry } from '../../../src/extension/index.js'
import { changeMembers, readMembers } from '../members.js'
import { requireOwner, requireProject } from '../project.js'

interface MemberParams {
  userId: string
}

const userIdSchema = {
  type: 'object',
  properties: { userId: { type: 'string', minLength: 1, maxLength: 200, description: 'The user id to add or remove' } },
  required: ['userId'],
  additionalProperties: false,
}

/**
 * `rdm.member.add|remove|list`: the member table of the current project. Members may use the
 * project as if shared with them (see the ProjectAuthz adapter). Only the owner changes the table.
 * Not offered to the model: sharing is a person's decision.
 */
export function registerMembers(registry: Registry, host: Pick<Host, 'accessChanged'>): void {
  registry.addCommand<MemberParams>(
    {
      id: 'rdm.member.add',
      title: 'Add project member',
      description: 'Shares the current project with a user (owner only). Adding an existing member changes nothing.',
      paramsSchema: userIdSchema,
      risk: 'medium',
    },
    async (params, context) => {
      const project = requireProject(context, 'rdm.member.add')
      requireOwner(context, project)
      const { after } = await changeMembers(context.kv, project.id, (members) => [...members, params.userId])
      return { projectId: project.id, members: after }
    },
  )

  registry.addCommand<MemberParams>(
    {
      id: 'rdm.member.remove',
      title: 'Remove project member',
      description:
        'Stops sharing the current project with a user (owner only). Takes effect on their next request, and their open streams end.',
      paramsSchema: userIdSchema,
      risk: 'medium',
    },
    async (params, context) => {
      const project = requireProject(context, 'rdm.member.remove')
      requireOwner(context, project)
      const { before, after } = await changeMembers(context.kv, project.id, (members) =>
        members.filter((member) => member !== params.userId),
      )
      // The removed member's open streams end now rather than at their next periodic re-check.
      if (after.length < before.length) await host.accessChanged(project.id)
      return { projectId: project.id, members: after }
    },
  )

  registry.addCommand(
    {
      id: 'rdm.member.list',
      title: 'List project members',
      description: 'Lists the users the current project is shared with.',
      paramsSchema: { type: 'object', properties: {}, additionalProperties: false },
      risk: 'low',
      idempotent: true,
    },
    async (_params, context) => {
      const project = requireProject(context, 'rdm.member.list')
      return { projectId: project.id, members: await readMembers(context.kv, project.id) }
    },
  )
}
