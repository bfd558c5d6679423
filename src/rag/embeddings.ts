import { tokenize } from './text.js'

/** Turns texts into vectors of a fixed dimension. */
export interface Embedder {
  /** What made the vectors (provider, model, dimension); vectors of different ids are not comparable. */
  readonly id: string
  readonly dimensions: number
  /** Texts per request the provider accepts. */
  readonly batchSize: number
  embed(texts: readonly string[], signal?: AbortSignal): Promise<number[][]>
}

/** The embeddings section of the config file. */
export interface EmbeddingSettings {
  provider: 'hash' | 'openai'
  model?: string
  baseUrl?: string
  apiKeyEnv?: string
  dimensions?: number
}

export class EmbeddingError extends Error {
  readonly status: number | undefined
  constructor(message: string, status?: number) {
    super(message)
    this.name = 'EmbeddingError'
    this.status = status
  }
}

/**
 * The zero-configuration embedder: feature hashing of tokens (CJK bigrams included) and of adjacent
 * token pairs into a signed vector, L2-normalised. Deterministic, local, instant — it finds texts
 * that share words, not meaning; configure a real provider for semantic search.
 */
export class HashingEmbedder implements Embedder {
  readonly id: string
  readonly dimensions: number
  readonly batchSize = 256

  constructor(dimensions = 256) {
    this.dimensions = dimensions
    this.id = `hash-v1:${dimensions}`
  }

  async embed(texts: readonly string[]): Promise<number[][]> {
    return texts.map((text) => this.embedOne(text))
  }

  embedOne(text: string): number[] {
    const vector = new Float64Array(this.dimensions)
    const tokens = tokenize(text)
    const add = (feature: string, weight: number): void => {
      const hash = fnv1a(feature)
      vector[hash % this.dimensions]! += hash & 0x80000000 ? -weight : weight
    }
    for (let index = 0; index < tokens.length; index++) {
      add(tokens[index]!, 1)
      if (index + 1 < tokens.length) add(`${tokens[index]} ${tokens[index + 1]}`, 0.5)
    }
    let norm = 0
    for (const value of vector) norm += value * value
    norm = Math.sqrt(norm)
    // An empty text still needs a valid vector for the cosine operator: a fixed unit vector.
    if (norm === 0) return Array.from({ length: this.dimensions }, (_, index) => (index === 0 ? 1 : 0))
    return Array.from(vector, (value) => Math.round((value / norm) * 1e6) / 1e6)
  }
}

/** 32-bit FNV-1a over the UTF-16 code units (stable across platforms and runs). */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5
  for (let index = 0; index < text.length; index++) {
    hash ^= text.charCodeAt(index)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash >>> 0
}

/**
 * An OpenAI-compatible `/embeddings` endpoint (OpenAI, Azure-compatible gateways, vLLM, Ollama, …).
 * 429 and 5xx are retried with backoff, honouring Retry-After; the key never appears in an error.
 */
export class OpenAIEmbedder implements Embedder {
  readonly id: string
  readonly dimensions: number
  readonly batchSize = 64
  readonly #options: {
    model: string
    baseUrl: string
    apiKey: string | undefined
    dimensions: number
    sendDimensions: boolean
  }

  constructor(options: {
    model: string
    baseUrl: string
    apiKey?: string
    dimensions: number
    sendDimensions?: boolean
  }) {
    this.#options = { ...options, apiKey: options.apiKey, sendDimensions: options.sendDimensions ?? true }
    this.dimensions = options.dimensions
    this.id = `openai:${options.model}:${options.dimensions}`
  }

  async embed(texts: readonly string[], signal?: AbortSignal): Promise<number[][]> {
    if (texts.length === 0) return []
    const { model, baseUrl, apiKey, dimensions, sendDimensions } = this.#options
    const body = JSON.stringify({
      model,
      input: texts,
      encoding_format: 'float',
      ...(sendDimensions && { dimensions }),
    })
    for (let attempt = 0; ; attempt++) {
      let response: Response
      try {
        response = await fetch(`${baseUrl.replace(/\/+$/, '')}/embeddings`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(apiKey && { authorization: `Bearer ${apiKey}` }) },
          body,
          ...(signal && { signal }),
        })
      } catch (error) {
        if (signal?.aborted || attempt >= 3)
          throw new EmbeddingError(`embeddings request failed: ${(error as Error).message}`)
        await sleep(backoff(attempt, null), signal)
        continue
      }
      if (response.ok) return this.#parse(await response.json(), texts.length)
      const text = redact(await response.text().catch(() => ''), apiKey)
      if ((response.status === 429 || response.status >= 500) && attempt < 3) {
        await sleep(backoff(attempt, response.headers.get('retry-after')), signal)
        continue
      }
      throw new EmbeddingError(
        `embeddings endpoint answered ${response.status}: ${text.slice(0, 300)}`,
        response.status,
      )
    }
  }

  #parse(json: unknown, expected: number): number[][] {
    const data = (json as { data?: Array<{ index?: number; embedding?: unknown }> }).data
    if (!Array.isArray(data) || data.length !== expected)
      throw new EmbeddingError(
        `embeddings endpoint returned ${Array.isArray(data) ? data.length : 'no'} vectors for ${expected} texts`,
      )
    const vectors: number[][] = new Array(expected)
    data.forEach((entry, position) => {
      const vector = entry.embedding
      if (
        !Array.isArray(vector) ||
        vector.length !== this.dimensions ||
        !vector.every((value) => typeof value === 'number' && Number.isFinite(value))
      ) {
        throw new EmbeddingError(
          `embeddings endpoint returned a vector of ${Array.isArray(vector) ? vector.length : 'no'} numbers; configured dimensions: ${this.dimensions}`,
        )
      }
      vectors[typeof entry.index === 'number' ? entry.index : position] = vector as number[]
    })
    return vectors
  }
}

function backoff(attempt: number, retryAfter: string | null): number {
  const seconds = retryAfter ? Number(retryAfter) : NaN
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds * 1000, 30_000)
  return 250 * 2 ** attempt + Math.random() * 100
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms)
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer)
        reject(new EmbeddingError('aborted'))
      },
      { once: true },
    )
  })
}

function redact(text: string, secret: string | undefined): string {
  return secret ? text.split(secret).join('[redacted]') : text
}

/** The embedder the configuration names (the hashing embedder when none is configured). */
export function createEmbedder(
  settings: EmbeddingSettings | undefined,
  env: NodeJS.ProcessEnv = process.env,
): Embedder {
  if (!settings || settings.provider === 'hash') return new HashingEmbedder(settings?.dimensions ?? 256)
  if (!settings.model || !settings.baseUrl || !settings.dimensions)
    throw new Error('embeddings: provider openai needs model, baseUrl and dimensions')
  return new OpenAIEmbedder({
    model: settings.model,
    baseUrl: settings.baseUrl,
    ...(settings.apiKeyEnv && env[settings.apiKeyEnv] && { apiKey: env[settings.apiKeyEnv] }),
    dimensions: settings.dimensions,
  })
}

/** Embeds any number of texts in the provider's batches. */
export async function embedAll(
  embedder: Embedder,
  texts: readonly string[],
  signal?: AbortSignal,
): Promise<number[][]> {
  const vectors: number[][] = []
  for (let start = 0; start < texts.length; start += embedder.batchSize) {
    vectors.push(...(await embedder.embed(texts.slice(start, start + embedder.batchSize), signal)))
  }
  return vectors
}
