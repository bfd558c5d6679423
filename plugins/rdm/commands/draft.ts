import { randomUUID } from 'node:crypto'
import type { CommandContext, Registry } from '../../../src/extension/index.js'
import { requireProject } from '../project.js'

interface DraftParams {
  title: string
  body: string
}

export function draftKey(projectId: string, draftId: string): string {
  return `draft:${projectId}:${draftId}`
}

/** What the confirmation card shows; reads nothing and writes nothing. */
export function previewDraft(params: DraftParams, context: CommandContext): string {
  const where = context.project ? `project ${context.project.name}` : 'no project (the command will fail: it needs one)'
  return `Write draft "${params.title}" (${params.body.length} chars) into ${where}`
}

/** `rdm.draft.compose`: writes a draft into the plugin's store, keyed by project. High risk, always confirmed. */
export function registerDraft(registry: Registry): void {
  registry.addCommand<DraftParams>(
    {
      id: 'rdm.draft.compose',
      title: 'Compose draft',
      description: 'Writes a titled text draft into the current project. A person confirms it before it is written.',
      paramsSchema: {
        type: 'object',
        properties: {
          title: { type: 'string', minLength: 1, maxLength: 200 },
          body: { type: 'string', maxLength: 100_000 },
        },
        required: ['title', 'body'],
        additionalProperties: false,
      },
      risk: 'high',
      confirm: true,
      exposeAsTool: {},
      preview: previewDraft,
    },
    async (params, context) => {
      const project = requireProject(context, 'rdm.draft.compose')
      const draftId = randomUUID()
      const bytes = Buffer.byteLength(params.body, 'utf8')
      await context.kv.set(draftKey(project.id, draftId), {
        draftId,
        projectId: project.id,
        title: params.title,
        body: params.body,
        authorId: context.actor.onBehalfOf,
        createdAt: new Date().toISOString(),
      })
      context.log.info('draft written', { projectId: project.id, draftId, bytes })
      return { draftId, projectId: project.id, title: params.title, bytes }
    },
  )
}
