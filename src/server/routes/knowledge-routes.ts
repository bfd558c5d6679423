import type { FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import {
  detectFormat,
  RetrievalScopeError,
  UploadTooLargeError,
  type Ingestor,
  type RetrievalHit,
  type SourceFormat,
  type StagedUpload,
} from '../../rag/index.js'
import type { KnowledgeItem, User } from '../../store/index.js'
import { caller } from '../auth.js'
import { decodeCursor, toListAnswer } from '../cursor.js'
import { stringProblem } from '../hostile-input.js'
import { runIdempotent } from '../idempotency.js'
import { HttpProblem, notFound } from '../problem.js'
import { IdParams, KnowledgeItem as KnowledgeItemSchema, PageOf, PageQuery, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['knowledge']
const problem = Type.Ref('Problem')

const Chunk = Type.Object(
  { id: Type.String(), seq: Type.Integer(), heading: Type.String(), text: Type.String() },
  { title: 'KnowledgeChunk' },
)

const KnowledgeCreate = Type.Object(
  {
    title: Type.String({ minLength: 1, maxLength: 500, pattern: '\\S' }),
    text: Type.String({ minLength: 1, maxLength: 2_000_000, pattern: '\\S' }),
  },
  { additionalProperties: false },
)

const searchModes = ['hybrid', 'fulltext', 'vector'] as const

/** A plain string enum (one `enum` keyword), so an unknown mode gets one message naming the modes. */
const SearchMode = Type.Unsafe<(typeof searchModes)[number]>({
  type: 'string',
  enum: [...searchModes],
  default: 'hybrid',
  description:
    'Which search paths run. `hybrid` (default): full text and vectors, fused with Reciprocal Rank Fusion. `fulltext`: words only (CJK as bigrams), ranked by match. `vector`: embeddings only, the nearest neighbours by cosine similarity, unfiltered. In `hybrid`, a hit that matched no word of the query is kept only when its similarity reaches the relevance floor (config `knowledge.minSimilarity`, default 0.3). Another value is 400 `validation_failed`.',
})

const SearchQuery = Type.Object(
  {
    q: Type.String({
      minLength: 1,
      maxLength: 20_000,
      pattern: '\\S',
      description: 'What to look for, in any language (not a query language: operators are text)',
    }),
    k: Type.Optional(Type.Integer({ minimum: 1, maximum: 50, default: 10 })),
    mode: Type.Optional(SearchMode),
  },
  { additionalProperties: false },
)

const SearchHit = Type.Object(
  {
    chunkId: Type.String(),
    itemId: Type.String(),
    projectId: Type.String(),
    ownerId: Type.String(),
    title: Type.String(),
    heading: Type.String(),
    text: Type.String(),
    snippet: Type.String(),
    highlights: Type.Array(Type.Tuple([Type.Integer(), Type.Integer()]), {
      description: '[start, end) of matched spans within snippet',
    }),
    score: Type.Number({ description: 'Reciprocal Rank Fusion score (k = 60)' }),
    shared: Type.Boolean(),
    fulltextRank: Type.Union([Type.Integer(), Type.Null()]),
    vectorSimilarity: Type.Union([Type.Number(), Type.Null()]),
  },
  { title: 'SearchHit' },
)
const SearchAnswer = Type.Object({ items: Type.Array(SearchHit), nextCursor: Type.Null() })

function itemView(item: KnowledgeItem, user: User): KnowledgeItem & { shared: boolean } {
  return { ...item, shared: item.ownerId !== user.id }
}

export function registerKnowledgeRoutes(app: App, deps: ServerDeps): void {
  const { store, ingestor, retriever, knowledge, projects } = deps

  app.post(
    '/projects/:id/knowledge',
    {
      attachValidation: true,
      config: { multipart: true },
      schema: {
        operationId: 'addKnowledge',
        tags,
        summary:
          'Add knowledge: JSON {title, text}, or multipart/form-data with one `file` (.txt .md .html .pdf .docx) and an optional `title`. 201 when a small text is ready at once; 202 while it ingests in the background',
        params: IdParams,
        body: KnowledgeCreate,
        response: {
          201: KnowledgeItemSchema,
          202: KnowledgeItemSchema,
          ...problemResponses,
          413: problem,
          415: problem,
          422: problem,
          429: problem,
          507: problem,
        },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const project = await projects.resolve(user, request.params.id, 'write')
      let created: KnowledgeItem
      if (request.isMultipart()) {
        const declared = Number(request.headers['content-length'])
        if (declared > deps.maxKnowledgeFileBytes + 64 * 1024)
          throw new HttpProblem(
            'payload_too_large',
            `knowledge files are limited to ${deps.maxKnowledgeFileBytes} bytes`,
          )
        const release = deps.uploads.acquire(user.id, reply)
        let upload: Upload | undefined
        try {
          upload = await readUpload(request, ingestor, deps.maxKnowledgeFileBytes)
          await knowledge.ensureVolume(user, upload.staged.size, deps.maxKnowledgeBytesPerUser)
          // What an Idempotency-Key stands for: the title and the file's content.
          ;(request as { body: unknown }).body = {
            title: upload.title,
            filename: upload.filename,
            sha256: upload.staged.sha256,
          }
          const staged = upload
          created = await runIdempotent(request, reply, store, user.id, 202, async (tx) => {
            await knowledge.ensureVolume(user, staged.staged.size, deps.maxKnowledgeBytesPerUser, tx)
            return ingestor.insertFile(tx, {
              projectId: project.id,
              ownerId: user.id,
              title: staged.title,
              filename: staged.filename,
              format: staged.format,
              staged: staged.staged,
            })
          })
        } finally {
          release()
          if (upload) await ingestor.discard(upload.staged)
        }
      } else {
        if (request.validationError) throw request.validationError
        const body = request.body
        await knowledge.ensureVolume(user, Buffer.byteLength(body.text), deps.maxKnowledgeBytesPerUser)
        const chunks = await ingestor.prepareText(body.text)
        created = await runIdempotent(request, reply, store, user.id, chunks ? 201 : 202, async (tx) => {
          await knowledge.ensureVolume(user, Buffer.byteLength(body.text), deps.maxKnowledgeBytesPerUser, tx)
          return ingestor.insertText(
            tx,
            { projectId: project.id, ownerId: user.id, title: body.title, text: body.text },
            chunks,
          )
        })
      }
      if (created.ingestStatus === 'pending') ingestor.enqueue(created.id)
      return itemView(created, user)
    },
  )

  app.get(
    '/projects/:id/knowledge',
    {
      schema: {
        operationId: 'listKnowledge',
        tags,
        summary: "A project's knowledge the caller may see: every published item and their own drafts, newest first",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(KnowledgeItemSchema), ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      const page = await knowledge.list(user, request.params.id, {
        limit: request.query.limit ?? 50,
        after: decodeCursor(request.query.cursor),
      })
      return toListAnswer(page, (item) => itemView(item, user))
    },
  )

  app.get(
    '/knowledge/:id',
    {
      schema: {
        operationId: 'getKnowledge',
        tags,
        summary: 'A knowledge item with its first chunks (GET /api/knowledge/:id/chunks pages through all)',
        params: IdParams,
        response: {
          200: Type.Object({
            ...KnowledgeItemSchema.properties,
            chunks: Type.Array(Chunk),
            chunksNextCursor: Type.Union([Type.String(), Type.Null()]),
          }),
          ...problemResponses,
        },
      },
    },
    async (request) => {
      const user = caller(request)
      const item = await knowledge.item(user, request.params.id)
      const chunks = toListAnswer(await knowledge.chunks(item, { limit: 100 }), chunkView)
      return { ...itemView(item, user), chunks: chunks.items, chunksNextCursor: chunks.nextCursor }
    },
  )

  app.get(
    '/knowledge/:id/chunks',
    {
      schema: {
        operationId: 'listKnowledgeChunks',
        tags,
        summary: "A knowledge item's chunks, in order",
        params: IdParams,
        querystring: PageQuery,
        response: { 200: PageOf(Chunk), ...problemResponses },
      },
    },
    async (request) => {
      const item = await knowledge.item(caller(request), request.params.id)
      return toListAnswer(
        await knowledge.chunks(item, { limit: request.query.limit ?? 50, after: decodeCursor(request.query.cursor) }),
        chunkView,
      )
    },
  )

  app.post(
    '/knowledge/:id/publish',
    {
      schema: {
        operationId: 'publishKnowledge',
        tags,
        summary:
          'Publish an item of yours: members of the project find it too (idempotent; 409 when its ingestion failed)',
        params: IdParams,
        body: Type.Optional(Type.Object({}, { additionalProperties: false })),
        response: { 200: KnowledgeItemSchema, ...problemResponses, 409: problem },
      },
    },
    async (request) => {
      const user = caller(request)
      return itemView(await knowledge.publish(user, request.params.id), user)
    },
  )

  app.delete(
    '/knowledge/:id',
    {
      schema: {
        operationId: 'deleteKnowledge',
        tags,
        summary: 'Delete an item of yours (soft: searches stop finding it at once)',
        params: IdParams,
        response: { 204: Type.Null(), ...problemResponses },
      },
    },
    async (request, reply) => {
      await knowledge.remove(caller(request), request.params.id)
      return reply.code(204).send(null)
    },
  )

  app.get(
    '/projects/:id/search',
    {
      schema: {
        operationId: 'searchProject',
        tags: ['search'],
        summary:
          'Hybrid search (full text + vectors, RRF) over the project’s knowledge the caller may see — the same retrieval the agent uses',
        params: IdParams,
        querystring: SearchQuery,
        response: { 200: SearchAnswer, ...problemResponses },
      },
    },
    async (request) => {
      const user = caller(request)
      const { q, k, mode } = request.query
      try {
        const hits = await retriever.retrieveShared(user.id, q, {
          projectId: request.params.id,
          k: k ?? 10,
          ...(mode && { mode }),
        })
        return { items: hits.map(hitView), nextCursor: null }
      } catch (error) {
        if (error instanceof RetrievalScopeError) throw notFound('project')
        throw error
      }
    },
  )

  app.get(
    '/search',
    {
      schema: {
        operationId: 'searchAll',
        tags: ['search'],
        summary: 'Hybrid search over every project the caller may see',
        querystring: SearchQuery,
        response: { 200: SearchAnswer, ...problemResponses },
      },
    },
    async (request) => {
      const { q, k, mode } = request.query
      const hits = await retriever.retrieveShared(caller(request).id, q, { k: k ?? 10, ...(mode && { mode }) })
      return { items: hits.map(hitView), nextCursor: null }
    },
  )
}

function chunkView(chunk: { id: string; seq: number; heading: string; text: string }) {
  return { id: chunk.id, seq: chunk.seq, heading: chunk.heading, text: chunk.text }
}

function hitView(hit: RetrievalHit) {
  return hit
}

interface Upload {
  title: string
  filename: string
  format: SourceFormat
  staged: StagedUpload
}

/**
 * The one file of a multipart request, streamed to disk (415 for an unsupported type, 413 over the size
 * limit), and its title.
 */
async function readUpload(request: FastifyRequest, ingestor: Ingestor, maxBytes: number): Promise<Upload> {
  let file: { filename: string; format: SourceFormat; staged: StagedUpload } | undefined
  const fields: Record<string, string> = {}
  try {
    for await (const part of request.parts({
      limits: { fileSize: maxBytes + 1, files: 1, fields: 10, fieldSize: 10_000 },
    })) {
      if (part.type === 'file') {
        if (part.fieldname !== 'file') {
          part.file.resume()
          throw new HttpProblem(
            'validation_failed',
            `body.${part.fieldname}: unknown field (send the file as \`file\`)`,
            {
              errors: [{ path: `body.${part.fieldname}`, message: 'unknown field' }],
            },
          )
        }
        if (!part.filename.trim()) {
          part.file.resume()
          throw new HttpProblem('validation_failed', 'body.file.filename: must not be empty (it names the item)', {
            errors: [{ path: 'body.file.filename', message: 'must not be empty' }],
          })
        }
        const format = detectFormat(part.filename, part.mimetype)
        if (!format) {
          part.file.resume()
          throw new HttpProblem(
            'unsupported_media_type',
            `cannot read ${JSON.stringify(part.filename)}: upload .txt, .md, .html, .pdf or .docx`,
          )
        }
        const staged = await ingestor.stageUpload(part.file, maxBytes).catch((error: unknown) => {
          if (error instanceof UploadTooLargeError)
            throw new HttpProblem(
              'payload_too_large',
              `the file is larger than ${maxBytes} bytes; knowledge files are limited to that`,
            )
          throw error
        })
        file = { filename: part.filename, format, staged }
      } else if (part.fieldname === 'title') {
        fields.title = String(part.value)
      } else if (part.fieldname === 'file') {
        throw new HttpProblem('validation_failed', 'body.file: must be a file (a part with a filename), not text', {
          errors: [{ path: 'body.file', message: 'must be a file' }],
        })
      } else {
        // Like a JSON body, a multipart body takes only the fields it names.
        throw new HttpProblem('validation_failed', `body.${part.fieldname}: unknown field`, {
          errors: [{ path: `body.${part.fieldname}`, message: 'unknown field' }],
        })
      }
    }
    if (!file)
      throw new HttpProblem('validation_failed', 'body.file: a multipart upload needs a file field', {
        errors: [{ path: 'body.file', message: 'is required' }],
      })
    const title = (fields.title ?? file.filename.replace(/\.[^.]+$/, '')).trim() || file.filename
    // The file name first: a title made from it would otherwise be blamed for its length.
    for (const [path, value] of [
      ['body.file.filename', file.filename],
      ['body.title', title],
    ] as const) {
      const problemText = stringProblem(value) ?? (value.length > 500 ? 'must be at most 500 characters' : null)
      if (problemText)
        throw new HttpProblem('validation_failed', `${path}: ${problemText}`, {
          errors: [{ path, message: problemText }],
        })
    }
    if (file.staged.size === 0)
      throw new HttpProblem('validation_failed', 'body.file: the file is empty', {
        errors: [{ path: 'body.file', message: 'is empty' }],
      })
    return { title, filename: file.filename, format: file.format, staged: file.staged }
  } catch (error) {
    if (file) await ingestor.discard(file.staged)
    throw multipartProblem(error)
  }
}

/**
 * What the multipart parser throws for a client's mistake (no boundary, a body cut short, a second
 * file, too many fields) as a 400; anything else as it is.
 */
function multipartProblem(error: unknown): unknown {
  if (error instanceof HttpProblem || !(error instanceof Error)) return error
  const code = (error as { code?: unknown }).code
  if (code === 'FST_FILES_LIMIT')
    return new HttpProblem('validation_failed', 'body.file: send one file per upload', {
      errors: [{ path: 'body.file', message: 'only one file may be sent' }],
    })
  if (code === 'FST_FIELDS_LIMIT' || code === 'FST_PARTS_LIMIT' || code === 'FST_PROTO_VIOLATION')
    return new HttpProblem('validation_failed', 'body: a multipart upload takes one `file` and an optional `title`')
  if (/multipart|boundary|unexpected end|malformed/i.test(error.message))
    return new HttpProblem('bad_request', `the multipart body cannot be read: ${error.message}`)
  return error
}
