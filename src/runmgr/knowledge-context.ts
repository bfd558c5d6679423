import type { RetrievalHit } from '../rag/index.js'

/** A hit as kept with the run (enough to rebuild the prompt block on resume and to cite it). */
export interface InjectedHit {
  chunkId: string
  itemId: string
  title: string
  heading: string
  text: string
  shared: boolean
}

/** What a run put in front of the model from project knowledge; `autoInject: false` when turned off. */
export interface KnowledgeContext {
  autoInject?: false
  hits?: InjectedHit[]
}

/** At most this many passages, and this many characters of them, go into the prompt. */
const maxHits = 4
const maxChars = 6000
/** A vector-only match below this cosine similarity is more likely noise than help. */
const minSimilarity = 0.3

/**
 * The hits worth putting in the prompt: found by words (full text), or close enough in meaning;
 * best first, within the size budget.
 */
export function selectForInjection(hits: readonly RetrievalHit[]): InjectedHit[] {
  const selected: InjectedHit[] = []
  let chars = 0
  for (const hit of hits) {
    if (hit.fulltextRank === null && (hit.vectorSimilarity ?? 0) < minSimilarity) continue
    if (selected.length >= maxHits || chars + hit.text.length > maxChars) break
    chars += hit.text.length
    selected.push({ chunkId: hit.chunkId, itemId: hit.itemId, title: hit.title, heading: hit.heading, text: hit.text, shared: hit.shared })
  }
  return selected
}

/** The system-prompt block: numbered passages with their sources, and how to use them. */
export function knowledgeBlock(hits: readonly InjectedHit[]): string {
  const passages = hits.map((hit, index) => {
    const source = [hit.title, hit.heading].filter(Boolean).join(' — ')
    return `[${index + 1}] ${source} (item ${hit.itemId}${hit.shared ? ', published by a colleague' : ''})\n${hit.text}`
  })
  return [
    'Project knowledge that may help with the user’s message. Cite a passage as [n] when you use it; if none answers the question, say so rather than guess. knowledge_search finds more.',
    ...passages,
  ].join('\n\n')
}
