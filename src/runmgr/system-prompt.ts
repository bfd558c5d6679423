import type { CommandBus } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import type { LanguageModel, ModelMessage } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import { hasKnowledge, type Executor, type Run, type TranscriptMessage } from '../store/index.js'
import { buildModelMessages, trimToBudget } from './history.js'
import {
  knowledgeBlock,
  knowledgeRule,
  mayInject,
  selectForInjection,
  type KnowledgeContext,
} from './knowledge-context.js'

const baseSystemPrompt =
  'You are an agent working inside Plinth. Use the tools offered when they help; a person may have to approve some calls. Answer concisely.'
const noToolsPrompt =
  'You cannot use tools or look anything up in this conversation. When a question needs data you do not have, say so plainly instead of inventing it.'
const capPrompt =
  'The maximum number of tool rounds for this run has been reached. Answer now with what you have, without calling tools, and say that the limit was reached.'

/** The messages of one model call: the system prompt (operator, project, plugins, knowledge), then the trimmed transcript. */
export function buildPrompt(
  bus: CommandBus,
  operatorPrompt: string | undefined,
  run: Run,
  model: LanguageModel,
  atCap: boolean,
  transcript: TranscriptMessage[],
  knowledge: KnowledgeContext | null,
): ModelMessage[] {
  const notes = bus.catalog.notes
  const skills = bus.catalog.skills
  const system = [
    baseSystemPrompt,
    operatorPrompt,
    run.profile.systemPrompt,
    ...notes,
    skills.length > 0
      ? `Skills you can follow:\n${skills.map((skill) => `- ${skill.name}: ${skill.description}`).join('\n')}`
      : undefined,
    model.supportsTools ? undefined : noToolsPrompt,
    knowledge?.hits && knowledge.hits.length > 0 ? knowledgeRule : undefined,
  ]
    .filter(Boolean)
    .join('\n\n')
  const passages = knowledge?.hits && knowledge.hits.length > 0 ? knowledgeBlock(knowledge.hits) : null
  const budget = Math.floor(model.contextWindow * 0.7) - Math.ceil((system.length + (passages?.length ?? 0)) / 4)
  const history = trimToBudget(buildModelMessages(transcript), budget)
  if (passages) {
    // Just before the user's message they were retrieved for (the last user message).
    const at = history.findLastIndex((message) => message.role === 'user')
    history.splice(at < 0 ? 0 : at, 0, { role: 'user', content: passages })
  }
  return [
    { role: 'system', content: system },
    ...history,
    ...(atCap ? [{ role: 'system' as const, content: capPrompt }] : []),
  ]
}

/** The top knowledge hits for the run's user message, or `{hits: []}` when there are none (or retrieval failed). */
export async function retrieveKnowledge(
  deps: { store: Executor; retriever?: Retriever; log: PluginLogger },
  run: Run,
  transcript: readonly TranscriptMessage[],
  signal: AbortSignal,
  known?: boolean,
): Promise<KnowledgeContext> {
  const input = transcript.findLast((message) => message.role === 'user')?.content
  if (!deps.retriever || !input) return { hits: [] }
  try {
    // One cheap look instead of a full hybrid search (several queries) in a project with no knowledge.
    if (!(known ?? (await hasKnowledge(deps.store, run.projectId)))) return { hits: [] }
    const hits = await deps.retriever.retrieveShared(run.ownerId, input, { projectId: run.projectId, k: 8, signal })
    return { hits: selectForInjection(hits.filter((hit) => mayInject(hit, run.ownerId, run.profile.injectFrom))) }
  } catch (error) {
    deps.log.warn('knowledge retrieval for the prompt failed; the run goes on without it', {
      runId: run.id,
      err: error,
    })
    return { hits: [] }
  }
}
