import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  EmbedderMismatchError,
  EmbeddingError,
  HashingEmbedder,
  Ingestor,
  InterruptedReembedError,
  memoryLimits,
  OpenAIEmbedder,
  prepareEmbeddings,
  reembedAll,
  Retriever,
  vectorIndexWarning,
} from '../src/rag/index.js'
import { createPluginLogger } from '../src/cmdbus/index.js'
import { createProject, createUser, openStore, type Store } from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { runPlinth } from './helpers/cli-process.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { startTestServer } from './helpers/test-server.js'

/** An OpenAI-compatible /embeddings endpoint (real wire format) whose vectors come from a small hashing embedder. */
async function startFakeEmbeddings(dimensions: number): Promise<{
  url: string
  requests: Array<{ auth: string | undefined; body: { model: string; input: string[]; dimensions?: number } }>
  failNext: number
  close(): Promise<void>
}> {
  const hasher = new HashingEmbedder(dimensions)
  const state = { failNext: 0 }
  const requests: Array<{ auth: string | undefined; body: { model: string; input: string[]; dimensions?: number } }> =
    []
  const server: Server = createServer(async (request: IncomingMessage, response) => {
    let raw = ''
    for await (const chunk of request) raw += chunk
    const body = JSON.parse(raw) as { model: string; input: string[]; dimensions?: number }
    requests.push({ auth: request.headers.authorization, body })
    if (state.failNext > 0) {
      state.failNext--
      response
        .writeHead(503, { 'content-type': 'application/json', 'retry-after': '0' })
        .end('{"error":{"message":"overloaded"}}')
      return
    }
    const vectors = await hasher.embed(body.input)
    // Real servers may answer out of order; the index says which input each vector is for.
    const data = vectors.map((embedding, index) => ({ object: 'embedding', index, embedding })).reverse()
    response
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ object: 'list', data, model: body.model, usage: { prompt_tokens: 1, total_tokens: 1 } }))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  const port = typeof address === 'object' && address ? address.port : 0
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    get failNext() {
      return state.failNext
    },
    set failNext(value: number) {
      state.failNext = value
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}

describe('an OpenAI-compatible embeddings provider', () => {
  let fake: Awaited<ReturnType<typeof startFakeEmbeddings>>
  let store: Store

  beforeAll(async () => {
    fake = await startFakeEmbeddings(32)
    store = await openTestStore('pglite')
  })
  afterAll(async () => {
    await store?.close()
    await fake?.close()
  })

  it('embeds through /embeddings (key sent, order by index, retries a 503) and powers search', async () => {
    const embedder = new OpenAIEmbedder({
      model: 'text-embedding-test',
      baseUrl: fake.url,
      apiKey: 'sk-embed-secret-0123456789',
      dimensions: 32,
    })
    fake.failNext = 1
    const server = await startTestServer(store, { embedder })
    try {
      const user = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body
        .id
      const item = await server.request('POST', `/api/projects/${project}/knowledge`, {
        token: user.token,
        body: { title: 'Vectors', text: 'The heron migration happens in spring.' },
      })
      expect(item.body.ingestStatus).toBe('ready')
      const hits = (
        await server.request('GET', `/api/projects/${project}/search?q=heron%20migration&mode=vector`, {
          token: user.token,
        })
      ).body.items
      expect(hits[0].itemId).toBe(item.body.id)
      expect(fake.requests.every((request) => request.auth === 'Bearer sk-embed-secret-0123456789')).toBe(true)
      expect(fake.requests[0]!.body).toMatchObject({ model: 'text-embedding-test', dimensions: 32 })
    } finally {
      await server.close()
    }
  })

  it('reports a vector of the wrong size clearly, without the key', async () => {
    const wrong = new OpenAIEmbedder({
      model: 'm',
      baseUrl: fake.url,
      apiKey: 'sk-embed-secret-0123456789',
      dimensions: 64,
    })
    await expect(wrong.embed(['x'])).rejects.toThrow(/vector of 32 numbers; configured dimensions: 64/)
    const down = new OpenAIEmbedder({
      model: 'm',
      baseUrl: 'http://127.0.0.1:1/v1',
      apiKey: 'sk-embed-secret-0123456789',
      dimensions: 32,
    })
    const error = await down.embed(['x']).catch((caught: Error) => caught)
    expect(String(error)).not.toContain('sk-embed-secret')
  })
})

describe('the recorded embedder', () => {
  it('refuses a different embedder once knowledge exists, naming the re-embed command; re-embedding fixes it', async () => {
    const store = await openTestStore('pglite')
    try {
      await prepareEmbeddings(store, new HashingEmbedder(256))
      const user = await createUser(store, 'embedder-owner')
      if ('error' in user) throw new Error('name taken')
      const project = await store.transaction((tx) => createProject(tx, user.id, { name: 'p' }))
      const ingestor = new Ingestor({
        store,
        embedder: new HashingEmbedder(256),
        log: createPluginLogger(pino({ level: 'silent' }), 'rag'),
      })
      await ingestor.addText({
        projectId: project.id,
        ownerId: user.id,
        title: 'A',
        text: 'Alpaca grooming guide.\n\nSecond paragraph about wool.',
      })
      const smaller = new HashingEmbedder(64)
      const refused = await prepareEmbeddings(store, smaller).catch((error: unknown) => error)
      expect(refused).toBeInstanceOf(EmbedderMismatchError)
      expect(String((refused as Error).message)).toMatch(/hash-v1:256.*hash-v1:64.*plinth knowledge reembed/s)
      const progress: Array<[number, number]> = []
      expect(await reembedAll(store, smaller, (done, total) => progress.push([done, total]))).toBe(1)
      expect(progress.at(-1)).toEqual([1, 1])
      await prepareEmbeddings(store, smaller)
      const retriever = new Retriever({ store, embedder: smaller, adapter: () => null })
      expect((await retriever.retrieve(user.id, 'alpaca wool', { mode: 'vector' }))[0]?.title).toBe('A')
    } finally {
      await store.close()
    }
  })

  it('a re-embed cut short: the start says so and how to finish, and running it again does', async () => {
    const store = await openTestStore('pglite')
    try {
      const before = new HashingEmbedder(256)
      await prepareEmbeddings(store, before)
      const user = await createUser(store, 'interrupted-owner')
      if ('error' in user) throw new Error('name taken')
      const project = await store.transaction((tx) => createProject(tx, user.id, { name: 'p' }))
      const ingestor = new Ingestor({
        store,
        embedder: before,
        log: createPluginLogger(pino({ level: 'silent' }), 'rag'),
      })
      for (const title of ['A', 'B'])
        await ingestor.addText({ projectId: project.id, ownerId: user.id, title, text: `Alpaca guide ${title}.` })
      const retriever = new Retriever({ store, embedder: before, adapter: () => null })
      await retriever.memories.remember(user.id, { text: 'prefers tea', key: 'tea' })
      // The new embeddings service fails after the chunks, before the memory.
      const smaller = new HashingEmbedder(64)
      let calls = 0
      const failing = {
        id: smaller.id,
        dimensions: smaller.dimensions,
        batchSize: 1,
        embed: async (texts: readonly string[]) => {
          if (++calls > 2) throw new EmbeddingError('embeddings endpoint answered 503')
          return smaller.embed(texts)
        },
      }
      await expect(reembedAll(store, failing)).rejects.toThrow(/503/)
      // Neither the old settings nor the new start: each says what happened and what to do.
      for (const embedder of [before, smaller]) {
        const refused = await prepareEmbeddings(store, embedder).catch((error: unknown) => error)
        expect(refused).toBeInstanceOf(InterruptedReembedError)
        expect(String((refused as Error).message)).toMatch(/^2 knowledge chunks and memories .* was interrupted/)
      }
      expect(await prepareEmbeddings(store, before).catch((error: unknown) => error)).toBeInstanceOf(
        InterruptedReembedError,
      )
      expect(await reembedAll(store, smaller)).toBe(3)
      await prepareEmbeddings(store, smaller)
      expect((await retriever.retrieve(user.id, 'alpaca', { mode: 'fulltext' })).length).toBe(2)
    } finally {
      await store.close()
    }
  })

  it('memories count as embedded too: another embedder is refused until re-embedding, which covers them', async () => {
    const store = await openTestStore('pglite')
    try {
      await prepareEmbeddings(store, new HashingEmbedder(256))
      const user = await createUser(store, 'memory-owner')
      if ('error' in user) throw new Error('name taken')
      const before = new Retriever({ store, embedder: new HashingEmbedder(256), adapter: () => null })
      await before.memories.remember(user.id, { text: 'prefers green tea', key: 'tea' })
      const smaller = new HashingEmbedder(64)
      expect(await prepareEmbeddings(store, smaller).catch((error: unknown) => error)).toBeInstanceOf(
        EmbedderMismatchError,
      )
      expect(await reembedAll(store, smaller)).toBe(1)
      await prepareEmbeddings(store, smaller)
      const { rows } = await sql<{ dims: number }>`select vector_dims(embedding) as dims from memories`.execute(
        testDb(store),
      )
      expect(rows).toEqual([{ dims: 64 }])
    } finally {
      await store.close()
    }
  })

  it('`plinth knowledge reembed` re-embeds with a progress report, and serve refuses a mismatched embedder until then', async () => {
    const cwd = await mkdtemp(join(tmpdir(), 'plinth-reembed-'))
    try {
      const dataDir = join(cwd, 'data')
      const store = await openStore({ dataDir })
      try {
        await prepareEmbeddings(store, new HashingEmbedder(256))
        const user = await createUser(store, 'cli-owner')
        if ('error' in user) throw new Error('name taken')
        const project = await store.transaction((tx) => createProject(tx, user.id, { name: 'p' }))
        const ingestor = new Ingestor({
          store,
          embedder: new HashingEmbedder(256),
          log: createPluginLogger(pino({ level: 'silent' }), 'rag'),
        })
        await ingestor.addText({ projectId: project.id, ownerId: user.id, title: 'Doc', text: 'Capybara facts.' })
      } finally {
        await store.close()
      }
      await writeFile(
        join(cwd, 'plinth.config.json'),
        JSON.stringify({ dataDir: './data', embeddings: { provider: 'hash', dimensions: 64 } }),
      )
      const serve = await runPlinth(['serve'], { cwd, env: { PORT: '0' }, timeoutMs: 60_000 })
      expect(serve.code).toBe(1)
      expect(serve.stderr).toMatch(/plinth knowledge reembed/)
      const reembed = await runPlinth(['knowledge', 'reembed'], { cwd, timeoutMs: 60_000 })
      expect(reembed.code, reembed.stderr).toBe(0)
      expect(reembed.stderr).toMatch(/re-embedding: 1\/1 chunk$/m)
      // One chunk is "1 chunk", never "1 chunks".
      expect(reembed.stdout).toMatch(/^re-embedded 1 chunk with hash-v1:64$/m)
    } finally {
      await rm(cwd, { recursive: true, force: true })
    }
  }, 150_000)
})

/** A user with a project, on a store recording the hashing embedder; and a quiet log. */
async function ownerOfProject(store: Store, name: string) {
  await prepareEmbeddings(store, new HashingEmbedder(256))
  const user = await createUser(store, name)
  if ('error' in user) throw new Error('name taken')
  const project = await store.transaction((tx) => createProject(tx, user.id, { name: 'p' }))
  return { user, project, log: createPluginLogger(pino({ level: 'silent' }), 'rag') }
}

/** Runs the background queue until it has nothing left, then stops it. */
async function ingestAll(ingestor: Ingestor): Promise<void> {
  await ingestor.start()
  await ingestor.idle()
  await ingestor.stop()
}

describe('ingestion that survives a crash', () => {
  it('an upload left pending by a stopped process is ingested by the next one', async () => {
    const store = await openTestStore('pglite')
    try {
      const { user, project, log } = await ownerOfProject(store, 'restart-owner')
      // The first process stored the upload and died before its queue ran.
      const first = new Ingestor({ store, embedder: new HashingEmbedder(256), log })
      const item = await store.transaction((tx) =>
        first.insertFile(tx, {
          projectId: project.id,
          ownerId: user.id,
          title: 'Notes',
          filename: 'notes.md',
          format: 'markdown',
          bytes: Buffer.from('# Ibex\n\nIbex herds climb at dawn.'),
        }),
      )
      expect(item.ingestStatus).toBe('pending')
      const second = new Ingestor({ store, embedder: new HashingEmbedder(256), log })
      await ingestAll(second)
      const retriever = new Retriever({ store, embedder: new HashingEmbedder(256), adapter: () => null })
      expect((await retriever.retrieve(user.id, 'ibex herds'))[0]).toMatchObject({ itemId: item.id, heading: 'Ibex' })
    } finally {
      await store.close()
    }
  })

  it('on the embedded database, chunks are stored in statements short enough for requests to get in between', async () => {
    // Each statement waits for the database to be quiet (requests first), and holds it for about
    // `statementMs`: when storing a chunk takes longer (an index past its buffers), one chunk each.
    const store = await openTestStore('pglite')
    try {
      const { user, project, log } = await ownerOfProject(store, 'paced-owner')
      const text = Array.from({ length: 20 }, (_, i) => `# Part ${i}\n\nMarmots whistle number ${i}.`).join('\n\n')
      const ingest = async (statementMs: number): Promise<{ statements: number; chunks: number }> => {
        let statements = 0
        const counted: Store = { ...store, quiet: (maxWaitMs) => (statements++, store.quiet(maxWaitMs)) }
        const ingestor = new Ingestor({
          store: counted,
          embedder: new HashingEmbedder(256),
          log,
          maxSyncChars: 0,
          statementMs,
        })
        const item = await ingestor.addText({ projectId: project.id, ownerId: user.id, title: 'M', text })
        await ingestAll(ingestor)
        const rows = await testDb(store)
          .selectFrom('knowledge_chunks')
          .select('id')
          .where('item_id', '=', item.id)
          .execute()
        return { statements, chunks: rows.length }
      }
      const unbounded = await ingest(0)
      expect(unbounded).toEqual({ statements: Math.ceil(unbounded.chunks / 8), chunks: 20 })
      expect(await ingest(0.001)).toEqual({ statements: 20, chunks: 20 })
    } finally {
      await store.close()
    }
  })

  it('on the embedded database (no autovacuum), the planner learns how many chunks there are once they have grown', async () => {
    // Left believing the table nearly empty, it scanned every chunk of a project instead of using the indexes.
    const store = await openTestStore('pglite')
    try {
      const { user, project, log } = await ownerOfProject(store, 'stats-owner')
      const ingestor = new Ingestor({ store, embedder: new HashingEmbedder(256), log, maxSyncChars: 0 })
      const text = Array.from({ length: 700 }, (_, i) => `# Part ${i}\n\nOtters juggle stone ${i}.`).join('\n\n')
      await ingestor.addText({ projectId: project.id, ownerId: user.id, title: 'O', text })
      await ingestAll(ingestor)
      const { rows } = await sql<{ reltuples: number }>`
        select reltuples::float8 as reltuples from pg_class where relname = 'knowledge_chunks'`.execute(testDb(store))
      expect(Number(rows[0]!.reltuples)).toBeGreaterThanOrEqual(700)
    } finally {
      await store.close()
    }
  })

  it('on the embedded database, an index past the buffers gets a start warning naming the setting', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plinth-buffers-'))
    const store = await openStore({ dataDir: dir, pgliteSharedBuffers: '128kB' })
    try {
      const { user, project, log } = await ownerOfProject(store, 'buffers-owner')
      expect(await vectorIndexWarning(store)).toBeUndefined()
      const ingestor = new Ingestor({ store, embedder: new HashingEmbedder(256), log, maxSyncChars: 0 })
      const text = Array.from({ length: 300 }, (_, i) => `# Part ${i}\n\nGeckos climb wall ${i}.`).join('\n\n')
      await ingestor.addText({ projectId: project.id, ownerId: user.id, title: 'G', text })
      await ingestAll(ingestor)
      expect(await vectorIndexWarning(store)).toMatch(
        /^the knowledge index \(\d+ MB\) is larger than the embedded database's buffers \(1 MB\).*PLINTH_PGLITE_SHARED_BUFFERS \(e\.g\. \d+MB/,
      )
    } finally {
      await store.close()
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('an embeddings service that stops answering: hybrid search and memory recall go on with full text; vector search is 503', async () => {
    const store = await openTestStore('pglite')
    const hashing = new HashingEmbedder()
    let down = false
    const flaky = {
      id: hashing.id,
      dimensions: hashing.dimensions,
      batchSize: hashing.batchSize,
      embed: async (texts: readonly string[]) => {
        if (down) throw new EmbeddingError('embeddings request failed: connect ECONNREFUSED 127.0.0.1:1')
        return hashing.embed(texts)
      },
    }
    const server = await startTestServer(store, { embedder: flaky })
    try {
      const user = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body
        .id
      const added = await server.request('POST', `/api/projects/${project}/knowledge`, {
        token: user.token,
        body: { title: 'Zebras', text: 'Zebra stripes confuse biting flies.' },
      })
      expect(added.status).toBe(201)
      const remembered = await server.request('POST', '/api/memories', {
        token: user.token,
        body: { key: 'tea', text: 'prefers green tea' },
      })
      expect(remembered.status).toBe(201)
      down = true
      const search = await server.request('GET', `/api/projects/${project}/search?q=zebra`, { token: user.token })
      expect(search.status).toBe(200)
      expect(search.body.items.map((hit: { title: string }) => hit.title)).toEqual(['Zebras'])
      const vector = await server.request('GET', `/api/projects/${project}/search?q=zebra&mode=vector`, {
        token: user.token,
      })
      expect(vector.status).toBe(503)
      expect(vector.body.code).toBe('service_unavailable')
      expect(vector.body.detail).toMatch(/embeddings service did not answer.*mode=fulltext/)
      const recalled = await server.request('GET', '/api/memories?q=tea', { token: user.token })
      expect(recalled.status).toBe(200)
      expect(recalled.body.items.map((memory: { key: string }) => memory.key)).toEqual(['tea'])
      // A new memory needs its embedding: 503 with the reason, nothing written (not a 502 naming no cause).
      const unembedded = await server.request('POST', '/api/memories', {
        token: user.token,
        body: { key: 'coffee', text: 'dislikes coffee' },
      })
      expect([unembedded.status, unembedded.body.code]).toEqual([503, 'service_unavailable'])
      expect(unembedded.body.detail).toMatch(/embeddings service did not answer/)
    } finally {
      await server.close()
      await store.close()
    }
  })

  for (const engine of testEngines())
    it(`a scope’s memory limit holds against requests sent at once (${engine})`, async () => {
      const store = await openTestStore(engine)
      const hashing = new HashingEmbedder()
      // Every request passes the first look at the count, then all their embeddings answer together:
      // their writes race for the last places.
      const racing = 10
      let waiting = 0
      let go!: () => void
      const together = new Promise<void>((resolve) => (go = resolve))
      const gathered = {
        id: hashing.id,
        dimensions: hashing.dimensions,
        batchSize: hashing.batchSize,
        embed: async (texts: readonly string[]) => {
          if (texts[0]?.startsWith('at once') && ++waiting === racing) go()
          if (texts[0]?.startsWith('at once')) await together
          return hashing.embed(texts)
        },
      }
      const server = await startTestServer(store, { embedder: gathered })
      const limit = memoryLimits.perScope
      memoryLimits.perScope = 5
      try {
        const user = await server.createUser()
        for (let index = 0; index < 3; index++)
          expect(
            (await server.request('POST', '/api/memories', { token: user.token, body: { text: `fact ${index}` } }))
              .status,
          ).toBe(201)
        const answers = await Promise.all(
          Array.from({ length: racing }, (_, index) =>
            server.request('POST', '/api/memories', { token: user.token, body: { text: `at once ${index}` } }),
          ),
        )
        expect(answers.filter((answer) => answer.status === 201)).toHaveLength(2)
        expect(answers.filter((answer) => answer.body.code === 'too_many_memories')).toHaveLength(racing - 2)
        const listed = await server.request('GET', '/api/memories?limit=100', { token: user.token })
        expect(listed.body.items).toHaveLength(5)
      } finally {
        memoryLimits.perScope = limit
        await server.close()
        await store.close()
      }
    })

  it('an item being ingested is not found by search until it is ready', async () => {
    const store = await openTestStore('pglite')
    const hashing = new HashingEmbedder()
    // The request's own attempt fails (the item is left to the background); the background's first
    // batch is stored, and its second held: chunks are stored, the item is not ready yet.
    let calls = 0
    let held!: () => void
    const holding = new Promise<void>((resolve) => (held = resolve))
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    const gated = {
      id: hashing.id,
      dimensions: hashing.dimensions,
      batchSize: 8,
      embed: async (texts: readonly string[]) => {
        calls++
        if (calls === 1) throw new EmbeddingError('not now')
        if (calls === 3) {
          held()
          await released
        }
        return hashing.embed(texts)
      },
    }
    const server = await startTestServer(store, { embedder: gated })
    try {
      const user = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body
        .id
      const paragraphs = Array.from(
        { length: 40 },
        (_, index) => `${index === 0 ? 'Quokkamarker ' : ''}Paragraph ${index}: ${'words of the text '.repeat(60)}`,
      )
      const adding = await server.request('POST', `/api/projects/${project}/knowledge`, {
        token: user.token,
        body: { title: 'Long', text: paragraphs.join('\n\n') },
      })
      expect(adding.status).toBe(202)
      await holding
      for (const mode of ['hybrid', 'fulltext', 'vector']) {
        const found = await server.request('GET', `/api/projects/${project}/search?q=quokkamarker&mode=${mode}`, {
          token: user.token,
        })
        expect([found.status, found.body.items], mode).toEqual([200, []])
      }
      release()
      const ready = async () =>
        (await server.request('GET', `/api/knowledge/${adding.body.id}`, { token: user.token })).body.ingestStatus
      await expect.poll(ready, { timeout: 60_000 }).toBe('ready')
      const found = await server.request('GET', `/api/projects/${project}/search?q=quokkamarker&mode=fulltext`, {
        token: user.token,
      })
      expect(found.body.items.map((hit: { title: string }) => hit.title)).toEqual(['Long'])
    } finally {
      release()
      await server.close()
      await store.close()
    }
  })

  it('a text whose embedding fails is accepted (202) and left pending for the background queue', async () => {
    const store = await openTestStore('pglite')
    const down = new OpenAIEmbedder({ model: 'm', baseUrl: 'http://127.0.0.1:1/v1', dimensions: 32 })
    const server = await startTestServer(store, { embedder: down })
    try {
      const user = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: user.token, body: { name: 'p' } })).body
        .id
      const answer = await server.request('POST', `/api/projects/${project}/knowledge`, {
        token: user.token,
        body: { title: 'T', text: 'text' },
      })
      expect(answer.status).toBe(202)
      expect(answer.body.ingestStatus).toBe('pending')
    } finally {
      await server.close()
      await store.close()
    }
  })
})
