import type { CommandContext, Host, Registry } from '../../../src/extension/index.js'
import { requireProject } from '../project.js'

interface DraftParams {
  title: string
  body: string
}

/** What the confirmation card shows; reads nothing and writes nothing. */
export function previewDraft(params: DraftParams, context: CommandContext): string {
  const where = context.project ? `project ${context.project.name}` : 'no project (the command will fail: it needs one)'
  return `Write draft "${params.title}" (${params.body.length} chars) into ${where}`
}

/**
 * `rdm.draft.compose`: writes a draft into the project's knowledge (a `draft` item of the user the
 * call is for, searchable by them at once; publishing shares it). High risk, always confirmed.
 */
export function registerDraft(registry: Registry, host: Pick<Host, 'addKnowledge'>): void {
  registry.addCommand<DraftParams>(
    {
      id: 'rdm.draft.compose',
      title: 'Compose draft',
      description:
        "Writes a titled text draft into the current project's knowledge (as a draft only its author sees until published). A person confirms it before it is written.",
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
      const { itemId } = await host.addKnowledge(context.actor, {
        projectId: project.id,
        title: params.title,
        text: params.body,
      })
      const bytes = Buffer.byteLength(params.body, 'utf8')
      context.log.info('draft written', { projectId: project.id, itemId, bytes })
      return { itemId, projectId: project.id, title: params.title, bytes, status: 'draft' }
    },
  )
}
