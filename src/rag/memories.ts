import {
  countMemories,
  deleteMemory,
  findMemoryByKey,
  getMemory,
  listMemories,
  newId,
  notFoundError,
  RequestError,
  searchMemoriesFullText,
  searchMemoriesVector,
  upsertMemoryWithinLimit,
  type JsonValue,
  type Memory,
  type MemoryScope,
  type Page,
  type PageRequest,
  type Store,
} from '../store/index.js'
import { EmbeddingError } from './embeddings.js'
import type { Retriever } from './retriever.js'
import { queryTokens, toTsvector, tsqueryStages } from './text.js'

/** Limits on one memory and on a scope (docs/guides/memory.md#limits). */
export const memoryLimits = { textChars: 4000, valueBytes: 16 * 1024, nameChars: 200, perScope: 10_000 }

/** What to remember: a fact's text (searched, shown to the model), with an optional structured value. */
export interface MemoryInput {
  scope?: 'user' | 'project'
  /** The project of a project memory. */
  projectId?: string | null
  namespace?: string
  /** Names the fact within its namespace; remembering the same key again replaces it (default: a new key). */
  key?: string
  value?: JsonValue | null
  text: string
}

/** Which memories to read: the caller's own, a project's, or both (default). */
export interface MemoryFilter {
  scope?: 'user' | 'project'
  projectId?: string
  namespace?: string
}

/** A memory a search found, with the fused score and why it matched. */
export interface MemoryHit extends Memory {
  score: number
  fulltextRank: number | null
  vectorSimilarity: number | null
}

const rrfK = 60

/**
 * Long-term memory (docs/guides/memory.md): a user's own facts and a project's, found with the same
 * hybrid retrieval as knowledge. A user memory is only ever its user's; a project memory is read by
 * whoever may read (search) the project and written by whoever may write to it — the ProjectAuthz
 * adapter decides, as for knowledge. Whatever the caller may not see is `not_found`.
 */
export class Memories {
  readonly #store: Store
  readonly #retriever: Retriever

  constructor(store: Store, retriever: Retriever) {
    this.#store = store
    this.#retriever = retriever
  }

  /** Writes a fact (replacing the one with the same namespace and key in its scope). */
  async remember(actorId: string, input: MemoryInput): Promise<{ memory: Memory; created: boolean }> {
    const scope = input.scope ?? 'user'
    const projectId = scope === 'project' ? (input.projectId ?? null) : null
    if (scope === 'project') {
      if (!projectId) throw new RequestError('validation_failed', 'a project memory needs the project (projectId)')
      await this.#mayWrite(actorId, projectId)
    }
    const namespace = input.namespace ?? 'default'
    checkSizes({ text: input.text, value: input.value, namespace, key: input.key })
    const owner = projectId ? { scope: 'project' as const, projectId } : { scope: 'user' as const, userId: actorId }
    const id = newId()
    const key = input.key ?? id
    const full = (): RequestError =>
      new RequestError(
        'too_many_memories',
        `this scope already holds ${memoryLimits.perScope} memories; forget some first`,
      )
    // A first look before the embedding is paid for; the write checks again, taking turns with the scope's others.
    const existing = input.key === undefined ? undefined : await findMemoryByKey(this.#store, owner, namespace, key)
    if (!existing && (await countMemories(this.#store, owner)) >= memoryLimits.perScope) throw full()
    let embedding: number[] | undefined
    try {
      ;[embedding] = await this.#retriever.embedder.embed([input.text])
    } catch (error) {
      if (!(error instanceof EmbeddingError)) throw error
      throw new RequestError(
        'service_unavailable',
        `the embeddings service did not answer (${error.message}); nothing was remembered, try again later`,
      )
    }
    const written = await upsertMemoryWithinLimit(
      this.#store,
      {
        id,
        scope,
        ownerId: actorId,
        projectId,
        namespace,
        key,
        value: input.value ?? null,
        text: input.text,
        search: toTsvector(input.text),
        embedding: embedding!,
      },
      memoryLimits.perScope,
    )
    if (written === 'full') throw full()
    return written
  }

  /** A memory the caller may see. */
  async get(actorId: string, id: string): Promise<Memory> {
    const memory = await getMemory(this.#store, id)
    if (!memory || !(await this.#mayRead(actorId, memory))) throw notFoundError('memory')
    return memory
  }

  /** Deletes a memory the caller may write; no later search finds it. */
  async forget(
    actorId: string,
    ref: { id: string } | { scope?: 'user' | 'project'; projectId?: string | null; namespace?: string; key: string },
  ): Promise<Memory> {
    const memory =
      'id' in ref
        ? await getMemory(this.#store, ref.id)
        : await findMemoryByKey(
            this.#store,
            ref.scope === 'project' && ref.projectId
              ? { scope: 'project', projectId: ref.projectId }
              : { scope: 'user', userId: actorId },
            ref.namespace ?? 'default',
            ref.key,
          )
    if (!memory || !(await this.#mayRead(actorId, memory))) throw notFoundError('memory')
    if (memory.projectId) await this.#mayWrite(actorId, memory.projectId)
    await deleteMemory(this.#store, memory.id)
    return memory
  }

  /** A page of the memories the caller sees, newest first. */
  async list(actorId: string, filter: MemoryFilter, page: PageRequest): Promise<Page<Memory>> {
    return listMemories(this.#store, await this.#scope(actorId, filter), page)
  }

  /** The memories best matching a query (words and meaning), best first. */
  async recall(
    actorId: string,
    query: string,
    options: MemoryFilter & { k?: number; signal?: AbortSignal } = {},
  ): Promise<MemoryHit[]> {
    const tokens = queryTokens(query)
    if (tokens.length === 0) return []
    const scope = await this.#scope(actorId, options)
    const k = options.k ?? 5
    const candidates = Math.max(20, k * 3)
    const embedder = this.#retriever.embedder
    const embedding = await this.#retriever.embedQuery(query, false, options.signal)
    const [fulltext, vector] = await Promise.all([
      searchMemoriesFullText(this.#store, scope, tsqueryStages(tokens), candidates),
      embedding ? searchMemoriesVector(this.#store, scope, embedding, embedder.dimensions, candidates) : [],
    ])
    const fused = new Map<string, MemoryHit>()
    const add = (list: Array<Memory & { score: number }>, path: 'fulltext' | 'vector') =>
      list.forEach((hit, index) => {
        const { score, ...memory } = hit
        const entry = fused.get(hit.id) ?? { ...memory, score: 0, fulltextRank: null, vectorSimilarity: null }
        entry.score += 1 / (rrfK + index + 1)
        if (path === 'fulltext') entry.fulltextRank = index + 1
        else entry.vectorSimilarity = Math.round(score * 1e6) / 1e6
        fused.set(hit.id, entry)
      })
    add(fulltext, 'fulltext')
    add(vector, 'vector')
    // The same relevance floor as knowledge: what matched no word must be close enough in meaning.
    return [...fused.values()]
      .filter((hit) => hit.fulltextRank !== null || (hit.vectorSimilarity ?? -1) >= this.#retriever.vectorOnlyFloor)
      .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1))
      .slice(0, k)
      .map((hit) => ({ ...hit, score: Math.round(hit.score * 1e6) / 1e6 }))
  }

  /** What a read may see: the caller's own memories and those of the projects it may search. */
  async #scope(actorId: string, filter: MemoryFilter): Promise<MemoryScope> {
    const projects =
      filter.scope === 'user'
        ? []
        : filter.projectId !== undefined
          ? await this.#retriever.searchableProjects(actorId, filter.projectId).catch(() => {
              throw notFoundError('project')
            })
          : await this.#retriever.searchableProjects(actorId)
    return {
      ...(filter.scope !== 'project' && { userId: actorId }),
      projectIds: projects,
      ...(filter.namespace !== undefined && { namespace: filter.namespace }),
    }
  }

  async #mayRead(actorId: string, memory: Memory): Promise<boolean> {
    if (memory.scope === 'user') return memory.ownerId === actorId
    return memory.projectId !== null && (await this.#retriever.mayAccess(actorId, memory.projectId, 'search'))
  }

  async #mayWrite(actorId: string, projectId: string): Promise<void> {
    if (!(await this.#retriever.mayAccess(actorId, projectId, 'write'))) {
      // Readable but not writable: forbidden; not even readable: not found (ids cannot be probed).
      if (await this.#retriever.mayAccess(actorId, projectId, 'read'))
        throw new RequestError('forbidden', 'you may not write to this project’s memory')
      throw notFoundError('project')
    }
  }
}

/** Characters as a person counts them (and JSON Schema's maxLength): code points, an emoji one. */
function characters(text: string): number {
  // UTF-16 units less the second half of each surrogate pair.
  return text.length - (text.match(/[\uDC00-\uDFFF]/g)?.length ?? 0)
}

function checkSizes(fields: {
  text: string
  value: JsonValue | null | undefined
  namespace: string
  key: string | undefined
}): void {
  if (fields.text.trim().length === 0) throw new RequestError('validation_failed', 'text: must not be empty')
  if (characters(fields.text) > memoryLimits.textChars)
    throw new RequestError('memory_too_large', `text: over ${memoryLimits.textChars} characters`)
  if (fields.value !== undefined && Buffer.byteLength(JSON.stringify(fields.value)) > memoryLimits.valueBytes)
    throw new RequestError('memory_too_large', `value: over ${memoryLimits.valueBytes} bytes as JSON`)
  for (const [name, text] of [
    ['namespace', fields.namespace],
    ['key', fields.key],
  ] as const) {
    if (text === undefined) continue
    if (text.length === 0) throw new RequestError('validation_failed', `${name}: must not be empty`)
    if (characters(text) > memoryLimits.nameChars)
      throw new RequestError('memory_too_large', `${name}: over ${memoryLimits.nameChars} characters`)
  }
}
