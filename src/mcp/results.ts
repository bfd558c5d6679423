import type { JsonValue } from '../extension/index.js'

type Json = { [key: string]: JsonValue }

/** A tool's answer as the MCP wire carries it (only what Plinth reads). */
export interface WireToolResult {
  content?: unknown
  structuredContent?: unknown
  isError?: unknown
}

/** An image a tool returned, kept as a file of the conversation (docs/guides/agent-runs.md#images-in-tool-results). */
export interface KeptImage {
  path: string
  mediaType: string
  width: number
  height: number
  bytes: number
}

/** Keeps an image's bytes as a file of the conversation; undefined when they are not an image it takes. */
export type ImageKeeper = (conversationId: string, bytes: Buffer) => Promise<KeptImage | undefined>

/**
 * The answer with its image items kept as files of the conversation: each becomes `{type: "image",
 * mimeType, path, width, height, bytes}` (no data), so the console shows it and a vision model is sent it.
 * An item that is not an image by its bytes stays as it came.
 */
export async function keepImages(
  answer: WireToolResult,
  conversationId: string,
  keep: ImageKeeper,
): Promise<WireToolResult> {
  if (!Array.isArray(answer.content)) return answer
  const content = await Promise.all(
    answer.content.map(async (item: unknown) => {
      const image = item as { type?: unknown; data?: unknown; mimeType?: unknown } | null
      if (image?.type !== 'image' || typeof image.data !== 'string') return item
      const kept = await keep(conversationId, Buffer.from(image.data, 'base64')).catch(() => undefined)
      return kept ? { type: 'image', mimeType: kept.mediaType, ...kept } : item
    }),
  )
  return { ...answer, content }
}

/** Bytes kept for the envelope's own fields beyond the result. */
const headroom = 4 * 1024

/**
 * The values a server's configuration takes from the environment (`envFrom`, `headersEnv`): secrets by
 * intent. A server that echoes one (an env dump, an error quoting its credentials) must not carry it into
 * results, the audit log or errors. Short values are left alone: they would blank out ordinary words.
 */
export function environmentSecrets(
  config: { envFrom?: { [name: string]: string }; headersEnv?: { [name: string]: string } },
  env: NodeJS.ProcessEnv = process.env,
): string[] {
  const names = [...Object.values(config.envFrom ?? {}), ...Object.values(config.headersEnv ?? {})]
  return names.map((name) => env[name]).filter((value): value is string => value !== undefined && value.length >= 8)
}

/** `value` with every occurrence of `secrets` in its strings replaced by `[redacted]`. */
export function redactSecrets<T>(value: T, secrets: readonly string[]): T {
  if (secrets.length === 0) return value
  const scrub = (item: unknown): unknown => {
    if (typeof item === 'string')
      return secrets.reduce(
        (text, secret) => (text.includes(secret) ? text.split(secret).join('[redacted]') : text),
        item,
      )
    if (Array.isArray(item)) return item.map(scrub)
    if (item !== null && typeof item === 'object')
      return Object.fromEntries(Object.entries(item).map(([key, entry]) => [key, scrub(entry)]))
    return item
  }
  return scrub(value) as T
}

/**
 * The command result of an MCP tool answer: its content items (text, image, audio, resource,
 * resource_link) and structured content, cut to fit `maxBytes` of JSON — binary data first, then the
 * longest texts — with `truncated: true` when anything was cut (docs/mcp.md, "Results").
 */
export function toCommandResult(answer: WireToolResult, maxBytes: number): Json {
  const content = Array.isArray(answer.content)
    ? answer.content
        .filter((item): item is Json => item !== null && typeof item === 'object' && !Array.isArray(item))
        .map(contentItem)
    : []
  const result: Json = { content }
  if (
    answer.structuredContent &&
    typeof answer.structuredContent === 'object' &&
    !Array.isArray(answer.structuredContent)
  )
    result.structuredContent = answer.structuredContent as Json
  return fit(result, maxBytes - headroom)
}

function contentItem(item: Json): Json {
  switch (item.type) {
    case 'text':
      return { type: 'text', text: typeof item.text === 'string' ? item.text : '' }
    case 'image':
      if (typeof item.path === 'string')
        return {
          type: 'image',
          mimeType: typeof item.mimeType === 'string' ? item.mimeType : 'application/octet-stream',
          path: item.path,
          width: typeof item.width === 'number' ? item.width : 0,
          height: typeof item.height === 'number' ? item.height : 0,
          bytes: typeof item.bytes === 'number' ? item.bytes : 0,
        }
      return {
        type: item.type,
        mimeType: typeof item.mimeType === 'string' ? item.mimeType : 'application/octet-stream',
        data: typeof item.data === 'string' ? item.data : '',
      }
    case 'audio':
      return {
        type: item.type,
        mimeType: typeof item.mimeType === 'string' ? item.mimeType : 'application/octet-stream',
        data: typeof item.data === 'string' ? item.data : '',
      }
    case 'resource': {
      const resource = (item.resource ?? {}) as Json
      return { type: 'resource', resource: pick(resource, ['uri', 'mimeType', 'text', 'blob']) }
    }
    case 'resource_link':
      return { type: 'resource_link', ...pick(item, ['uri', 'name', 'title', 'description', 'mimeType']) }
    default:
      return { type: typeof item.type === 'string' ? item.type : 'unknown' }
  }
}

function pick(source: Json, keys: string[]): Json {
  const out: Json = {}
  for (const key of keys) if (typeof source[key] === 'string') out[key] = source[key]
  return out
}

const size = (value: JsonValue): number => Buffer.byteLength(JSON.stringify(value))

function fit(result: Json, limit: number): Json {
  if (size(result) <= limit) return result
  const content = result.content as Json[]
  // Binary data the model cannot read in text goes first: its size stays.
  for (const item of content) {
    for (const key of ['data', 'blob'] as const) {
      const holder = key === 'blob' ? (item.resource as Json | undefined) : item
      const value = holder?.[key]
      if (holder && typeof value === 'string' && value.length > 0) {
        holder[key] = ''
        holder.omittedBytes = Math.floor((value.length * 3) / 4)
      }
    }
  }
  result.truncated = true
  if (size(result) <= limit && content.length > 0) return result
  if (result.structuredContent !== undefined && size(result) > limit) {
    delete result.structuredContent
    result.structuredContentOmitted = true
  }
  // Then texts, longest first, each cut to what is left.
  for (let guard = 0; size(result) > limit && guard < content.length * 4; guard++) {
    const texts = content.map((item) => (item.type === 'text' ? item : (item.resource as Json | undefined)))
    const longest = texts
      .filter((item): item is Json => typeof item?.text === 'string')
      .sort((a, b) => (b.text as string).length - (a.text as string).length)[0]
    if (!longest) break
    const text = longest.text as string
    const over = size(result) - limit
    // JSON escaping can make a character several bytes: cut at least what is over, and a margin.
    longest.text = text.slice(0, Math.max(0, text.length - over - 64))
  }
  return result
}

/** What the model reads of a result: its texts, and a line for each thing it cannot read as text. */
export function modelText(result: JsonValue): string {
  if (!result || typeof result !== 'object' || Array.isArray(result)) return JSON.stringify(result)
  const lines: string[] = []
  const content = Array.isArray(result.content) ? (result.content as Json[]) : []
  for (const item of content) {
    if (item.type === 'text') lines.push(String(item.text))
    else if (item.type === 'image' && typeof item.path === 'string')
      lines.push(`[image ${String(item.mimeType)} ${item.width}×${item.height}, kept as ${item.path}]`)
    else if (item.type === 'image' || item.type === 'audio')
      lines.push(
        `[${item.type} ${String(item.mimeType)}, ${typeof item.omittedBytes === 'number' ? item.omittedBytes : Math.floor((String(item.data).length * 3) / 4)} bytes]`,
      )
    else if (item.type === 'resource') {
      const resource = item.resource as Json
      lines.push(typeof resource.text === 'string' ? resource.text : `[resource ${String(resource.uri)}]`)
    } else if (item.type === 'resource_link')
      lines.push(`[resource ${String(item.uri)}${item.name ? ` (${String(item.name)})` : ''}]`)
  }
  if (result.structuredContent !== undefined && lines.length === 0) lines.push(JSON.stringify(result.structuredContent))
  if (result.truncated) lines.push('[the result was cut to fit]')
  return lines.join('\n')
}

/** The text of an error answer (`isError: true`), for the CommandError the model reads. */
export function errorText(answer: WireToolResult): string {
  const text = modelText(toCommandResult(answer, 64 * 1024))
  return text.trim() ? text.slice(0, 4000) : 'the tool reported an error'
}
