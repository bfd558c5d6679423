import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { Readable } from 'node:stream'
import { PathError, QuotaError } from '../../exec/index.js'
import { detectFormat, type StagedUpload } from '../../rag/index.js'
import { caller } from '../auth.js'
import { decodeKeyCursor, encodeKeyCursor } from '../cursor.js'
import { runIdempotent } from '../idempotency.js'
import { HttpProblem } from '../problem.js'
import { Id, KnowledgeItem, problemResponses } from '../schemas.js'
import type { App, ServerDeps } from '../server-deps.js'

const tags = ['files']
const problem = Type.Ref('Problem')
const FileParams = Type.Object({ id: Id, '*': Type.String({ maxLength: 1024 }) }, { additionalProperties: false })
const FileEntry = Type.Object(
  {
    path: Type.String(),
    type: Type.Union([Type.Literal('file'), Type.Literal('directory'), Type.Literal('symlink'), Type.Literal('other')]),
    size: Type.Integer(),
    modifiedAt: Type.String({ format: 'date-time' }),
  },
  { title: 'FileEntry' },
)

const mediaTypes: Record<string, string> = {
  txt: 'text/plain; charset=utf-8',
  md: 'text/markdown; charset=utf-8',
  csv: 'text/csv; charset=utf-8',
  json: 'application/json',
  html: 'text/html; charset=utf-8',
  pdf: 'application/pdf',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  svg: 'image/svg+xml',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  zip: 'application/zip',
}

/** A quota refusal as 507 `quota_exceeded`. */
function quotaProblem(error: unknown): never {
  if (error instanceof QuotaError) throw new HttpProblem('quota_exceeded', error.message)
  throw error
}

/** A path problem as the HTTP answer it deserves. */
function pathProblem(error: unknown): never {
  if (!(error instanceof PathError)) throw error
  if (error.code === 'not_found') throw new HttpProblem('not_found', error.message)
  if (error.code === 'too_large') throw new HttpProblem('payload_too_large', error.message)
  throw new HttpProblem('validation_failed', `path: ${error.message}`, {
    errors: [{ path: 'path', message: error.message }],
  })
}

/**
 * The conversation's work directory over HTTP (docs/guides/sandbox.md, docs/security.md#work-directories):
 * list, download, upload (size-limited), and register a file as a knowledge item. Only the
 * conversation's owner; paths follow the work directory's rules (relative, no `..`, no symlink out, no
 * sensitive segments).
 */
export function registerFileRoutes(app: App, deps: ServerDeps): void {
  const { exec } = deps

  app.get(
    '/conversations/:id/files',
    {
      schema: {
        operationId: 'listFiles',
        tags,
        summary: 'List the work directory (recursively, sorted by path); ?path= lists a directory in it',
        params: Type.Object({ id: Id }, { additionalProperties: false }),
        querystring: Type.Object(
          {
            path: Type.Optional(Type.String({ maxLength: 1024 })),
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 100 })),
            cursor: Type.Optional(Type.String({ maxLength: 2000 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ items: Type.Array(FileEntry), nextCursor: Type.Union([Type.String(), Type.Null()]) }),
          ...problemResponses,
        },
      },
    },
    async (request) => {
      const conversation = await deps.conversations.resolve(caller(request), request.params.id)
      const after = decodeKeyCursor(request.query.cursor)
      const limit = request.query.limit ?? 100
      const entries = (await exec.workdirs.list(conversation.id, request.query.path ?? '').catch(pathProblem)).filter(
        (entry) => after === undefined || entry.path > after,
      )
      const items = entries.slice(0, limit)
      return { items, nextCursor: entries.length > limit ? encodeKeyCursor(items.at(-1)!.path) : null }
    },
  )

  app.get(
    '/conversations/:id/files/*',
    {
      schema: {
        operationId: 'downloadFile',
        tags,
        summary: 'Download a file of the work directory',
        params: FileParams,
        response: {
          200: Type.String({ description: 'The file’s bytes (its media type by extension)' }),
          ...problemResponses,
          413: problem,
        },
      },
    },
    async (request, reply) => {
      const conversation = await deps.conversations.resolve(caller(request), request.params.id)
      const path = request.params['*']
      // Opened once, without following links; the bytes sent are the descriptor's (never a path's).
      const { handle, size } = await exec.workdirs.open(conversation.id, path).catch((error: unknown) => {
        if (error instanceof PathError && error.code === 'is_directory') {
          throw new HttpProblem(
            'validation_failed',
            `path: ${path || '.'} is a directory; list it with GET …/files?path=`,
            { errors: [{ path: 'path', message: 'is a directory' }] },
          )
        }
        return pathProblem(error)
      })
      if (size > exec.settings.maxDownloadBytes) {
        await handle.close()
        throw new HttpProblem(
          'payload_too_large',
          `the file is ${size} bytes; downloads are limited to ${exec.settings.maxDownloadBytes}`,
        )
      }
      const name = path.split('/').at(-1) ?? 'file'
      const extension = name.toLowerCase().match(/\.([a-z0-9]+)$/)?.[1] ?? ''
      reply.header('content-type', mediaTypes[extension] ?? 'application/octet-stream')
      reply.header('content-length', size)
      reply.header('content-disposition', `attachment; filename*=UTF-8''${encodeURIComponent(name)}`)
      reply.header('x-content-type-options', 'nosniff')
      // A file that grows meanwhile is cut at the announced length.
      return reply.send(
        handle.createReadStream({ start: 0, end: Math.max(0, size - 1), autoClose: true, emitClose: true }),
      )
    },
  )

  // Uploads take any content type as raw bytes, streamed to disk, in a scope of their own (nowhere else).
  void app.register(async (scope) => {
    const uploads = scope.withTypeProvider<TypeBoxTypeProvider>()
    // Whatever the Content-Type — JSON and multipart included — the body is the file (not parsed).
    uploads.removeAllContentTypeParsers()
    uploads.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
    uploads.put(
      '/conversations/:id/files/*',
      {
        schema: {
          operationId: 'uploadFile',
          tags,
          summary:
            'Upload a file into the work directory (the body is the file’s bytes, streamed to disk; parent directories are created)',
          params: FileParams,
          response: {
            201: Type.Object({ path: Type.String(), size: Type.Integer() }),
            ...problemResponses,
            413: problem,
            429: problem,
            507: problem,
          },
        },
      },
      async (request, reply) => {
        const user = caller(request)
        const conversation = await deps.conversations.resolve(user, request.params.id)
        const max = exec.settings.maxUploadBytes
        const declared = Number(request.headers['content-length'])
        if (declared > max)
          throw new HttpProblem('payload_too_large', `the file is ${declared} bytes; uploads are limited to ${max}`)
        // `dir/` names a directory: writing a file called `dir` instead would not be what was asked.
        if (request.url.split('?')[0]!.endsWith('/'))
          pathProblem(new PathError('invalid_path', 'a file path must not end with /'))
        const release = deps.uploads.acquire(user.id, reply)
        try {
          // A file replaced frees its own bytes: only the difference must fit. The room is counted before
          // the bytes arrive (concurrent uploads cannot share it); a body of unknown length gets what is left.
          const replacing = await exec.workdirs.fileSize(conversation.id, request.params['*']).catch(pathProblem)
          const known = Number.isFinite(declared)
          const files = replacing === null ? 1 : 0
          const reservation = await exec.quota
            .reserve(
              conversation.id,
              conversation.ownerId,
              (known ? declared : max) - (replacing ?? 0),
              files,
              known ? {} : { upTo: true },
            )
            .catch(quotaProblem)
          const limit = known ? max : Math.min(max, reservation.bytes + (replacing ?? 0))
          const body = request.body instanceof Readable ? request.body : Readable.from([])
          let written: { path: string; size: number; replaced: number | null }
          try {
            written = await exec.workdirs.write(conversation.id, request.params['*'], body, { maxBytes: limit })
          } catch (error) {
            await exec.quota.release(reservation)
            // Past the room the quota left (not past the upload limit): the quota's answer.
            if (error instanceof PathError && error.code === 'too_large' && limit < max)
              quotaProblem(new QuotaError(`the file does not fit the work directory's quota (${limit} bytes left)`))
            return pathProblem(error)
          }
          await exec.quota.settle(reservation, written)
          return reply.code(201).send({ path: written.path, size: written.size })
        } finally {
          release()
        }
      },
    )
  })

  app.delete(
    '/conversations/:id/files/*',
    {
      schema: {
        operationId: 'deleteFile',
        tags,
        summary:
          'Delete a file, a symlink (not what it points to) or a directory with everything in it, from the work directory',
        params: FileParams,
        response: { 204: Type.Null(), ...problemResponses },
      },
    },
    async (request, reply) => {
      const conversation = await deps.conversations.resolve(caller(request), request.params.id)
      const removed = await exec.workdirs.remove(conversation.id, request.params['*']).catch(pathProblem)
      await exec.quota.adjust(conversation.id, conversation.ownerId, { bytes: -removed.bytes, files: -removed.files })
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/conversations/:id/files/register',
    {
      schema: {
        operationId: 'registerFile',
        tags,
        summary:
          'Turn a file of the work directory (.txt .md .html .pdf .docx) into a knowledge item of the conversation’s project (202: it ingests in the background)',
        params: Type.Object({ id: Id }, { additionalProperties: false }),
        body: Type.Object(
          {
            path: Type.String({ minLength: 1, maxLength: 1024 }),
            title: Type.Optional(Type.String({ minLength: 1, maxLength: 500, pattern: '\\S' })),
          },
          { additionalProperties: false },
        ),
        response: { 202: KnowledgeItem, ...problemResponses, 413: problem, 415: problem, 507: problem },
      },
    },
    async (request, reply) => {
      const user = caller(request)
      const conversation = await deps.conversations.resolve(user, request.params.id)
      const project = await deps.projects.resolve(user, conversation.projectId, 'write')
      const { path, title } = request.body
      const filename = path.split('/').at(-1) ?? path
      const format = detectFormat(filename, undefined)
      if (!format)
        throw new HttpProblem(
          'unsupported_media_type',
          `${filename} cannot become knowledge: register a .txt, .md, .html, .pdf or .docx file`,
        )
      const { handle, size } = await exec.workdirs.open(conversation.id, path).catch((error: unknown) => {
        if (error instanceof PathError && error.code === 'is_directory')
          throw new HttpProblem('validation_failed', `path: ${path} is not a file`, {
            errors: [{ path: 'body.path', message: 'is not a file' }],
          })
        return pathProblem(error)
      })
      // Like an upload: one of the user's upload slots, streamed to a staging file (never whole in memory),
      // and the volume checked again, locked, in the transaction that adds the item.
      let release: (() => void) | undefined
      let staged: StagedUpload | undefined
      try {
        if (size > deps.maxKnowledgeFileBytes)
          throw new HttpProblem(
            'payload_too_large',
            `the file is ${size} bytes; knowledge files are limited to ${deps.maxKnowledgeFileBytes}`,
          )
        await deps.knowledge.ensureVolume(user, size, deps.maxKnowledgeBytesPerUser)
        release = deps.uploads.acquire(user.id, reply)
        staged = await deps.ingestor.stageUpload(
          handle.createReadStream({ autoClose: false, start: 0 }),
          deps.maxKnowledgeFileBytes,
        )
      } catch (error) {
        release?.()
        throw error
      } finally {
        await handle.close()
      }
      try {
        const file = staged
        // With an Idempotency-Key, a retry answers the item the first request made (the key stands for
        // the path and title).
        const item = await runIdempotent(request, reply, deps.store, user.id, 202, async (tx) => {
          await deps.knowledge.ensureVolume(user, file.size, deps.maxKnowledgeBytesPerUser, tx)
          return deps.ingestor.insertFile(tx, {
            projectId: project.id,
            ownerId: user.id,
            title: title ?? filename.replace(/\.[^.]+$/, ''),
            filename,
            format,
            staged: file,
          })
        })
        if (reply.getHeader('idempotent-replayed') === undefined) deps.ingestor.enqueue(item.id)
        return reply.send({ ...item, shared: false })
      } finally {
        release()
        await deps.ingestor.discard(staged)
      }
    },
  )
}
