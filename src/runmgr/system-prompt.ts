import type { CommandBus } from '../cmdbus/index.js'
import type { PluginLogger } from '../extension/index.js'
import type { LanguageModel, ModelMessage } from '../llm/index.js'
import type { Retriever } from '../rag/index.js'
import { hasKnowledge, hasMemories, type Executor, type Run, type TranscriptMessage } from '../store/index.js'
import { buildModelMessages, isToolImages, trimToBudget } from './history.js'
import {
  knowledgeBlock,
  knowledgeRule,
  mayInject,
  memoryBlock,
  memoryRule,
  selectForInjection,
  selectMemories,
  type KnowledgeContext,
  type RecalledMemory,
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
  summary?: string,
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
    knowledge?.memories && knowledge.memories.length > 0 ? memoryRule : undefined,
  ]
    .filter(Boolean)
    .join('\n\n')
  const blocks = [
    knowledge?.memories && knowledge.memories.length > 0 ? memoryBlock(knowledge.memories) : null,
    knowledge?.hits && knowledge.hits.length > 0 ? knowledgeBlock(knowledge.hits) : null,
  ].filter((block): block is string => block !== null)
  const extra = blocks.reduce((sum, block) => sum + block.length, summary?.length ?? 0)
  const budget = Math.floor(model.contextWindow * 0.7) - Math.ceil((system.length + extra) / 4)
  const history = trimToBudget(
    buildModelMessages(transcript, { vision: model.capabilities?.includes('vision') === true }),
    budget,
  )
  if (blocks.length > 0) {
    // Just before the user's message they were retrieved for (the last user message).
    const at = history.findLastIndex((message) => message.role === 'user' && !isToolImages(message))
    history.splice(at < 0 ? 0 : at, 0, ...blocks.map((content) => ({ role: 'user' as const, content })))
  }
  // The compacted messages' summary stands where they stood: before everything kept.
  if (summary) history.unshift({ role: 'user', content: summary })
  return [
    { role: 'system', content: system },
    ...history,
    ...(atCap ? [{ role: 'system' as const, content: capPrompt }] : []),
  ]
}

/**
 * What the run's user message brings into the prompt: the top knowledge hits (unless `autoInject` is
 * off) and, unless recall is off, the memories best matching it. Retrieval that fails is logged and
 * left out: the run goes on without it.
 */
export async function retrieveKnowledge(
  deps: { store: Executor; retriever?: Retriever; log: PluginLogger },
  run: Run,
  transcript: readonly TranscriptMessage[],
  signal: AbortSignal,
  known?: { hasKnowledge: boolean; hasMemories: boolean },
): Promise<KnowledgeContext> {
  const input = transcript.findLast((message) => message.role === 'user')?.content
  const inject = (run.knowledge as KnowledgeContext | null)?.autoInject !== false
  const recall = run.profile.memoryRecall !== false
  const context: KnowledgeContext = inject ? { hits: [] } : { autoInject: false }
  if (recall) context.memories = []
  if (!deps.retriever || !input) return context
  const retriever = deps.retriever
  const [hits, memories] = await Promise.all([
    inject ? knowledgeHits(deps, retriever, run, input, signal, known?.hasKnowledge) : undefined,
    recall ? recalled(deps, retriever, run, input, signal, known?.hasMemories) : undefined,
  ])
  if (hits) context.hits = hits
  if (memories) context.memories = memories
  return context
}

async function knowledgeHits(
  deps: { store: Executor; log: PluginLogger },
  retriever: Retriever,
  run: Run,
  input: string,
  signal: AbortSignal,
  known: boolean | undefined,
): Promise<KnowledgeContext['hits']> {
  try {
    // One cheap look instead of a full hybrid search (several queries) in a project with no knowledge.
    if (!(known ?? (await hasKnowledge(deps.store, run.projectId)))) return []
    const hits = await retriever.retrieveShared(run.ownerId, input, { projectId: run.projectId, k: 8, signal })
    return selectForInjection(hits.filter((hit) => mayInject(hit, run.ownerId, run.profile.injectFrom)))
  } catch (error) {
    deps.log.warn('knowledge retrieval for the prompt failed; the run goes on without it', {
      runId: run.id,
      err: error,
    })
    return []
  }
}

async function recalled(
  deps: { store: Executor; log: PluginLogger },
  retriever: Retriever,
  run: Run,
  input: string,
  signal: AbortSignal,
  known: boolean | undefined,
): Promise<RecalledMemory[]> {
  try {
    if (!(known ?? (await hasMemories(deps.store, run.ownerId, run.projectId)))) return []
    const hits = await retriever.memories.recall(run.ownerId, input, { projectId: run.projectId, k: 8, signal })
    // As for knowledge: a project memory another member wrote enters a prompt unasked only when the
    // project opts in (a member's agent may have been talked into remembering it).
    return selectMemories(hits.filter((hit) => mayInject(hit, run.ownerId, run.profile.injectFrom)))
  } catch (error) {
    deps.log.warn('memory recall for the prompt failed; the run goes on without it', { runId: run.id, err: error })
    return []
  }
}
