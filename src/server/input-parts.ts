import { createHash } from 'node:crypto'
import { Type } from 'typebox'
import type { WorkDirectories } from '../exec/index.js'
import { probeImage, type ImageInfo } from '../media/index.js'
import { detectFormat, mediaTypeOf } from '../rag/index.js'
import type { MessagePart } from '../store/index.js'
import { HttpProblem } from './problem.js'

/** Limits on the images of one message (docs/guides/agent-runs.md#images-in-messages). */
export const imageLimits = { maxImages: 8, maxBytes: 5 * 1024 * 1024, maxSide: 8192, maxPixels: 40_000_000 }

/** Limits on the documents of one message (docs/guides/agent-runs.md#files-in-messages). */
export const fileLimits = { maxFiles: 4, maxBytes: 10 * 1024 * 1024, maxTextChars: 100_000 }

/** What a run request's documents are read with: the document parser and the caller's knowledge. */
export interface DocumentSources {
  /** The text of a document (null: a type that cannot be read); throws when it cannot be parsed. */
  extract(filename: string, bytes: Buffer): Promise<string | null>
  /** A knowledge item the caller may see, with its extracted text (at most `fileLimits.maxTextChars`; null: not ready yet); throws when not found. */
  knowledge(
    id: string,
  ): Promise<{ title: string; filename: string | null; mediaType: string | null; text: string | null }>
}

/** A run request's `input` as parts: text, images given inline (a data URL) or as a conversation file, documents. */
export const InputPart = Type.Union([
  Type.Object(
    { type: Type.Literal('text'), text: Type.String({ maxLength: 200_000 }) },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      type: Type.Literal('image'),
      url: Type.Optional(Type.String({ maxLength: 8_000_000, description: 'A data URL (data:image/png;base64,…)' })),
      fileId: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 1024,
          description: 'A file of the conversation (its path, as uploaded)',
        }),
      ),
      mediaType: Type.Optional(Type.String({ description: 'Checked against the bytes' })),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      type: Type.Literal('file'),
      fileId: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 1024,
          description: 'A document among the conversation’s files (its path): .pdf, .docx, .html, .md or .txt',
        }),
      ),
      knowledgeId: Type.Optional(
        Type.String({ pattern: '^[0-9A-HJKMNP-TV-Z]{26}$', description: 'A knowledge item (its id, a ULID)' }),
      ),
    },
    { additionalProperties: false },
  ),
])

type Input =
  | string
  | Array<
      | { type: 'text'; text: string }
      | { type: 'image'; url?: string; fileId?: string; mediaType?: string }
      | { type: 'file'; fileId?: string; knowledgeId?: string }
    >

const extensions: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'image/gif': 'gif',
}

/**
 * The message's text and, when it has images, its stored parts: each image is checked from its bytes
 * (type, size, pixels) and kept as a file of the conversation (`.inputs/<hash>.<ext>`), so every later
 * round (and a resumed run) sends the same bytes.
 */
export async function resolveInput(
  workdirs: WorkDirectories,
  conversationId: string,
  input: Input,
  documents?: DocumentSources,
): Promise<{ text: string; parts?: MessagePart[] }> {
  if (typeof input === 'string') return { text: input }
  const images = input.filter((part) => part.type === 'image').length
  if (images > imageLimits.maxImages)
    throw invalid(`body.input: at most ${imageLimits.maxImages} images in one message (got ${images})`)
  const files = input.filter((part) => part.type === 'file').length
  if (files > fileLimits.maxFiles)
    throw invalidFile(`body.input: at most ${fileLimits.maxFiles} documents in one message (got ${files})`)
  const parts: MessagePart[] = []
  for (const [index, part] of input.entries()) {
    const where = `body.input[${index}]`
    if (part.type === 'text') {
      parts.push({ type: 'text', text: part.text })
      continue
    }
    if (part.type === 'file') {
      if (!documents) throw invalidFile(`${where}: documents cannot be given here`)
      parts.push(await resolveDocument(workdirs, conversationId, part, documents, where))
      continue
    }
    if ((part.url === undefined) === (part.fileId === undefined))
      throw invalid(`${where}: an image needs exactly one of url (a data URL) and fileId`)
    const bytes =
      part.url !== undefined
        ? dataUrlBytes(part.url, where)
        : await fileBytes(workdirs, conversationId, part.fileId!, where)
    const info = checkImage(bytes, part.mediaType ?? declaredType(part.url), where)
    const path =
      part.fileId ??
      (
        await workdirs.write(
          conversationId,
          `.inputs/${createHash('sha256').update(bytes).digest('hex').slice(0, 24)}.${extensions[info.mediaType]}`,
          bytes,
        )
      ).path
    parts.push({
      type: 'image',
      path,
      mediaType: info.mediaType,
      width: info.width,
      height: info.height,
      bytes: bytes.length,
    })
  }
  const text = parts.flatMap((part) => (part.type === 'text' ? [part.text] : [])).join('\n\n')
  if (!text.trim() && images === 0 && files === 0)
    throw new HttpProblem('validation_failed', 'body.input: a message needs text, an image or a document', {
      errors: [{ path: 'body.input', message: 'needs text, an image or a document' }],
    })
  return { text, parts }
}

/**
 * A document of the message: a conversation file (read here, parsed in the sandboxed parser; a PDF
 * must be one by its bytes) or a knowledge item the caller may see (its extracted text).
 */
async function resolveDocument(
  workdirs: WorkDirectories,
  conversationId: string,
  part: { fileId?: string; knowledgeId?: string },
  documents: DocumentSources,
  where: string,
): Promise<MessagePart> {
  if ((part.fileId === undefined) === (part.knowledgeId === undefined))
    throw invalidFile(`${where}: a document needs exactly one of fileId and knowledgeId`)
  const cut = (text: string) =>
    text.length > fileLimits.maxTextChars
      ? `${text.slice(0, fileLimits.maxTextChars)}\n[… ${text.length - fileLimits.maxTextChars} more characters left out]`
      : text
  if (part.knowledgeId !== undefined) {
    const item = await documents.knowledge(part.knowledgeId).catch(() => {
      throw invalidFile(`${where}.knowledgeId: no knowledge item ${part.knowledgeId} you can see`)
    })
    if (item.text === null) throw invalidFile(`${where}.knowledgeId: the item is not ingested yet (or failed)`)
    return {
      type: 'file',
      knowledgeId: part.knowledgeId,
      filename: item.filename ?? item.title,
      mediaType: item.mediaType ?? 'text/plain',
      bytes: Buffer.byteLength(item.text),
      // Already bounded by the source.
      text: item.text,
    }
  }
  const path = part.fileId!
  let bytes: Buffer
  try {
    const read = await workdirs.read(conversationId, path, { limit: fileLimits.maxBytes })
    if (read.size > fileLimits.maxBytes)
      throw invalidFile(`${where}: the document is ${read.size} bytes, over the ${fileLimits.maxBytes}-byte limit`)
    bytes = read.bytes
  } catch (error) {
    if (error instanceof HttpProblem) throw error
    throw invalidFile(`${where}.fileId: ${error instanceof Error ? error.message : 'cannot be read'}`)
  }
  const filename = path.split('/').at(-1) ?? path
  const pdf = /\.pdf$/i.test(filename)
  if (pdf && bytes.subarray(0, 5).toString('latin1') !== '%PDF-')
    throw invalidFile(`${where}: ${filename} is named a PDF, but its bytes are not one`)
  let text: string | null
  try {
    text = await documents.extract(filename, bytes)
  } catch (error) {
    throw invalidFile(
      `${where}: ${filename} cannot be read: ${error instanceof Error ? error.message : 'unknown error'}`,
    )
  }
  if (text === null)
    throw invalidFile(`${where}: ${filename} is not a document Plinth reads (.pdf, .docx, .html, .md, .txt)`)
  return {
    type: 'file',
    path,
    filename,
    mediaType: mediaTypeOf(detectFormat(filename, undefined) ?? 'text'),
    bytes: bytes.length,
    text: cut(text),
  }
}

function invalidFile(message: string): HttpProblem {
  return new HttpProblem('invalid_file', message)
}

function invalid(message: string): HttpProblem {
  return new HttpProblem('invalid_image', message)
}

function declaredType(url: string | undefined): string | undefined {
  return url ? /^data:([^;,]+)/.exec(url)?.[1] : undefined
}

function dataUrlBytes(url: string, where: string): Buffer {
  const match = /^data:([a-z]+\/[a-z0-9.+-]+)?;base64,([A-Za-z0-9+/=\s]*)$/i.exec(url)
  if (!match)
    throw invalid(`${where}.url: only a base64 data URL (data:image/png;base64,…); upload a file and give its fileId`)
  const bytes = Buffer.from(match[2]!, 'base64')
  if (bytes.length > imageLimits.maxBytes)
    throw invalid(`${where}: the image is ${bytes.length} bytes, over the ${imageLimits.maxBytes}-byte limit`)
  return bytes
}

async function fileBytes(
  workdirs: WorkDirectories,
  conversationId: string,
  path: string,
  where: string,
): Promise<Buffer> {
  try {
    const { bytes, size } = await workdirs.read(conversationId, path, { limit: imageLimits.maxBytes })
    if (size > imageLimits.maxBytes)
      throw invalid(`${where}: the image is ${size} bytes, over the ${imageLimits.maxBytes}-byte limit`)
    return bytes
  } catch (error) {
    if (error instanceof HttpProblem) throw error
    throw invalid(`${where}.fileId: ${error instanceof Error ? error.message : 'cannot be read'}`)
  }
}

/** The bytes must be one of the four formats, be what they are declared as, and fit the pixel limits. */
function checkImage(bytes: Buffer, declared: string | undefined, where: string): ImageInfo {
  const info = probeImage(bytes)
  if (!info) throw invalid(`${where}: the bytes are not a PNG, JPEG, WebP or GIF image`)
  if (declared && declared.toLowerCase() !== info.mediaType)
    throw invalid(`${where}: declared ${declared}, but the bytes are ${info.mediaType}`)
  if (
    info.width > imageLimits.maxSide ||
    info.height > imageLimits.maxSide ||
    info.width * info.height > imageLimits.maxPixels
  )
    throw invalid(
      `${where}: ${info.width}×${info.height} pixels is over the limit (${imageLimits.maxSide} a side, ${imageLimits.maxPixels} in all)`,
    )
  return info
}
