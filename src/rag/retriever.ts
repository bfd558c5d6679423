import type { PluginLogger, ProjectAction, ProjectAuthzAdapter } from '../extension/index.js'
import {
  RequestError,
  getProject,
  liveProjectIdsOwnedBy,
  searchChunksFullText,
  searchChunksVector,
  type ChunkHit,
  type ChunkScope,
  type Store,
} from '../store/index.js'
import { EmbeddingError, HashingEmbedder, type Embedder } from './embeddings.js'
import { Memories } from './memories.js'
import { queryTokens, snippet, tsqueryStages } from './text.js'
import { inSpan, setContent } from '../telemetry/index.js'

/** One search result, citable: which item (title, id), which chunk, and why it matched. */
export interface RetrievalHit {
  chunkId: string
  itemId: string
  projectId: string
  ownerId: string
  title: string
  heading: string
  /** The whole chunk. */
  text: string
  /** The part of the chunk around the match, with the matched spans. */
  snippet: string
  highlights: Array<[number, number]>
  /** Reciprocal Rank Fusion score (k = 60) over the lists the chunk appeared in. */
  score: number
  /** True when the chunk belongs to another user (found through project sharing). */
  shared: boolean
  /** Rank on the full-text path and cosine similarity on the vector path, where it was found. */
  fulltextRank: number | null
  vectorSimilarity: number | null
}

export interface RetrieveOptions {
  /** Search this project (the caller must be able to search it); without it, everything the caller may see. */
  projectId?: string
  /** Hits to return (default 10). */
  k?: number
  /** Which paths (default both, fused). */
  mode?: 'hybrid' | 'fulltext' | 'vector'
  signal?: AbortSignal
}

/** The project named does not exist or the caller may not search it (404 to an HTTP caller). */
export class RetrievalScopeError extends Error {
  constructor() {
    super('project not found')
    this.name = 'RetrievalScopeError'
  }
}

const rrfK = 60

/**
 * The default relevance floor (config `knowledge.minSimilarity`): in hybrid search, a hit the full-text
 * path did not find is kept only when its cosine similarity to the query reaches this. Unrelated texts
 * score about 0–0.25 with common semantic embedders (see `vectorOnlyFloor` for the hashing one).
 */
export const defaultMinSimilarity = 0.3

/**
 * The one retrieval implementation (docs/guides/knowledge-and-search.md) behind the HTTP search, the
 * `knowledge_search` tool, knowledge injection into runs and `host.knowledgeSearch`.
 *
 * `retrieve` searches the actor's own items (drafts included). `retrieveShared` adds other users'
 * *published* items in projects the ProjectAuthz adapter lets the actor search; every list (own
 * full text, own vector, shared full text, shared vector) is ranked on its own and the lists are
 * fused with RRF. With no adapter registered it is exactly `retrieve`.
 */
export class Retriever {
  readonly #store: Store
  readonly #embedder: () => Embedder
  readonly #adapter: () => ProjectAuthzAdapter | null
  readonly #minSimilarity: number
  /** Whether the floor was configured (it then applies whatever the embedder). */
  readonly #floorSet: boolean
  /** Long-term memory, searched the same way (docs/guides/memory.md). */
  readonly memories: Memories
  readonly #log: Pick<PluginLogger, 'warn'> | undefined

  constructor(options: {
    store: Store
    embedder: Embedder | (() => Embedder)
    adapter: () => ProjectAuthzAdapter | null
    minSimilarity?: number
    /** Where a hybrid search that went on without its vector half says so. */
    log?: Pick<PluginLogger, 'warn'>
  }) {
    this.#log = options.log
    this.#store = options.store
    this.#minSimilarity = options.minSimilarity ?? defaultMinSimilarity
    this.#floorSet = options.minSimilarity !== undefined
    const embedder = options.embedder
    this.#embedder = typeof embedder === 'function' ? embedder : () => embedder
    this.#adapter = options.adapter
    this.memories = new Memories(options.store, this)
  }

  /**
   * The query's embedding. An embeddings service that does not answer leaves a hybrid search to its
   * full-text half (logged), and fails one that needs the vector (`vectorOnly`) with 503
   * `service_unavailable`: full text still answers, a 500 would call it a bug.
   */
  async embedQuery(query: string, vectorOnly: boolean, signal?: AbortSignal): Promise<number[] | undefined> {
    try {
      const [embedding] = await this.#embedder().embed([query], signal)
      return embedding
    } catch (error) {
      if (!(error instanceof EmbeddingError) || signal?.aborted) throw error
      if (vectorOnly)
        throw new RequestError(
          'service_unavailable',
          `the embeddings service did not answer (${error.message}); full-text search (mode=fulltext) still works`,
        )
      this.#log?.warn('the embeddings service did not answer; the search used full text only', {
        message: error.message,
      })
      return undefined
    }
  }

  /** The hybrid relevance floor (config `knowledge.minSimilarity`). */
  get minSimilarity(): number {
    return this.#minSimilarity
  }

  /**
   * The similarity a hybrid hit the full-text path did not find must reach. None reaches it with the
   * built-in hashing embedder: its vectors hash the very words full text matches, so such a hit shares
   * no word with the query and is a collision of hashed features (one word in 256 dimensions). A
   * configured `knowledge.minSimilarity` applies as set.
   */
  get vectorOnlyFloor(): number {
    return !this.#floorSet && this.#embedder() instanceof HashingEmbedder ? Infinity : this.#minSimilarity
  }

  get embedder(): Embedder {
    return this.#embedder()
  }

  async retrieve(actorId: string, query: string, options: RetrieveOptions = {}): Promise<RetrievalHit[]> {
    const projects = await this.#projects(actorId, options.projectId, false)
    return this.#search(actorId, query, options, { own: { ownerId: actorId, projectIds: projects } })
  }

  async retrieveShared(actorId: string, query: string, options: RetrieveOptions = {}): Promise<RetrievalHit[]> {
    if (!this.#adapter()) return this.retrieve(actorId, query, options)
    const projects = await this.#projects(actorId, options.projectId, true)
    return this.#search(actorId, query, options, {
      own: { ownerId: actorId, projectIds: projects },
      shared: { actorId, projectIds: projects },
    })
  }

  /** Projects the actor may search: the one named (or a scope error), else all owned and shared ones. */
  searchableProjects(actorId: string, projectId?: string): Promise<string[]> {
    return this.#projects(actorId, projectId, true)
  }

  /** Whether the actor may perform `action` on a live project (its owner, or as the adapter grants). */
  async mayAccess(actorId: string, projectId: string, action: ProjectAction): Promise<boolean> {
    const project = await getProject(this.#store, projectId)
    if (project?.ownerId === actorId) return true
    const adapter = this.#adapter()
    if (!project || !adapter) return false
    return Promise.resolve(adapter.canAccessProject(actorId, projectId, action)).catch(() => false)
  }

  async #projects(actorId: string, projectId: string | undefined, withSharing: boolean): Promise<string[]> {
    const adapter = withSharing ? this.#adapter() : null
    if (projectId !== undefined) {
      const project = await getProject(this.#store, projectId)
      if (project?.ownerId === actorId) return [project.id]
      // Asked whether the project exists or not, so a missing id and a forbidden one take the same path.
      const allowed = adapter
        ? await Promise.resolve(adapter.canAccessProject(actorId, projectId, 'search')).catch(() => false)
        : false
      if (!project || !allowed) throw new RetrievalScopeError()
      return [project.id]
    }
    const ids = await liveProjectIdsOwnedBy(this.#store, actorId)
    if (!adapter) return ids
    for (const id of new Set(await adapter.listSharedProjects(actorId))) {
      if (typeof id !== 'string' || ids.includes(id)) continue
      if (!(await adapter.canAccessProject(actorId, id, 'search'))) continue
      if (await getProject(this.#store, id)) ids.push(id)
    }
    return ids
  }

  #search(actorId: string, query: string, options: RetrieveOptions, scope: ChunkScope): Promise<RetrievalHit[]> {
    return inSpan(
      'retrieval',
      {
        'gen_ai.operation.name': 'retrieval',
        'plinth.retrieval.mode': options.mode ?? 'hybrid',
        'plinth.retrieval.shared': Boolean(scope.shared),
        ...(options.projectId && { 'gen_ai.data_source.id': options.projectId }),
      },
      async (span) => {
        setContent(span, 'gen_ai.retrieval.query.text', () => query)
        const hits = await this.#hybrid(actorId, query, options, scope)
        span.setAttribute('plinth.retrieval.hits', hits.length)
        return hits
      },
    )
  }

  async #hybrid(actorId: string, query: string, options: RetrieveOptions, scope: ChunkScope): Promise<RetrievalHit[]> {
    const k = options.k ?? 10
    const mode = options.mode ?? 'hybrid'
    const tokens = queryTokens(query)
    // A query of stop words or punctuation only has nothing to match on.
    if (tokens.length === 0) return []
    const candidates = Math.max(20, k * 3)
    const scopes: ChunkScope[] = []
    if (scope.own) scopes.push({ own: scope.own })
    if (scope.shared) scopes.push({ shared: scope.shared })
    const store = this.#store
    const lists: Array<Promise<{ path: 'fulltext' | 'vector'; hits: ChunkHit[] }>> = []
    if (mode !== 'vector') {
      const stages = tsqueryStages(tokens)
      for (const part of scopes)
        lists.push(
          searchChunksFullText(store, part, stages, candidates).then((hits) => ({ path: 'fulltext' as const, hits })),
        )
    }
    if (mode !== 'fulltext') {
      const embedder = this.#embedder()
      const embedding = await this.embedQuery(query, mode === 'vector', options.signal)
      if (embedding)
        for (const part of scopes)
          lists.push(
            searchChunksVector(store, part, embedding, embedder.dimensions, candidates).then((hits) => ({
              path: 'vector' as const,
              hits,
            })),
          )
    }
    const fused = new Map<
      string,
      { hit: ChunkHit; score: number; fulltextRank: number | null; vectorSimilarity: number | null }
    >()
    for (const { path, hits } of await Promise.all(lists)) {
      hits.forEach((hit, index) => {
        const entry = fused.get(hit.chunkId) ?? { hit, score: 0, fulltextRank: null, vectorSimilarity: null }
        entry.score += 1 / (rrfK + index + 1)
        if (path === 'fulltext') entry.fulltextRank = Math.min(entry.fulltextRank ?? Infinity, index + 1)
        else entry.vectorSimilarity = Math.max(entry.vectorSimilarity ?? -Infinity, hit.score)
        fused.set(hit.chunkId, entry)
      })
    }
    // The relevance floor (hybrid): what matched no word of the query must be close enough in meaning.
    // `vector` asks for the nearest neighbours as they are.
    const floor = this.vectorOnlyFloor
    return [...fused.values()]
      .filter(
        (entry) => mode !== 'hybrid' || entry.fulltextRank !== null || (entry.vectorSimilarity ?? -Infinity) >= floor,
      )
      .sort((a, b) => b.score - a.score || (a.hit.chunkId < b.hit.chunkId ? -1 : 1))
      .slice(0, k)
      .map(({ hit, score, fulltextRank, vectorSimilarity }) => {
        const excerpt = snippet(hit.text, tokens)
        return {
          chunkId: hit.chunkId,
          itemId: hit.itemId,
          projectId: hit.projectId,
          ownerId: hit.ownerId,
          title: hit.title,
          heading: hit.heading,
          text: hit.text,
          snippet: excerpt.text,
          highlights: excerpt.highlights,
          score: Math.round(score * 1e6) / 1e6,
          shared: hit.ownerId !== actorId,
          fulltextRank,
          vectorSimilarity: vectorSimilarity === null ? null : Math.round(vectorSimilarity * 1e6) / 1e6,
        }
      })
  }
}
