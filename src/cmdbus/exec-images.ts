import { createHash } from 'node:crypto'
import { probeImage } from '../media/index.js'
import type { WorkDirectories } from '../exec/index.js'

/** An image a tool left in the work directory, as its result names it (docs/guides/agent-runs.md#images-in-tool-results). */
export interface ToolImage {
  path: string
  mediaType: string
  width: number
  height: number
  bytes: number
}

/** At most this many images per result, each at most this big (the same limits as a message's images). */
const maxImages = 4
const maxBytes = 5 * 1024 * 1024
const maxSide = 8192
const imageName = /\.(png|jpe?g|gif|webp)$/i

/**
 * The images an execution wrote: files of the conversation named like images, changed since it started,
 * that are images by their bytes and within the limits — newest first. Hidden directories (the inputs a
 * message brought, `.inputs/`) are not looked at.
 */
export async function writtenImages(
  workdirs: WorkDirectories,
  conversationId: string,
  sinceMs: number,
): Promise<ToolImage[]> {
  const entries = await workdirs.list(conversationId, '', 2000).catch(() => [])
  const candidates = entries
    .filter(
      (entry) =>
        entry.type === 'file' &&
        imageName.test(entry.path) &&
        !entry.path.split('/').some((segment) => segment.startsWith('.')) &&
        entry.size <= maxBytes &&
        // File times have a coarser grain than the clock: a little slack.
        Date.parse(entry.modifiedAt) >= sinceMs - 1000,
    )
    .sort((a, b) => Date.parse(b.modifiedAt) - Date.parse(a.modifiedAt))
  const images: ToolImage[] = []
  for (const entry of candidates) {
    if (images.length >= maxImages) break
    const read = await workdirs.read(conversationId, entry.path, { limit: maxBytes }).catch(() => undefined)
    const info = read && probeImage(read.bytes)
    if (!info || info.width > maxSide || info.height > maxSide) continue
    images.push({
      path: entry.path,
      mediaType: info.mediaType,
      width: info.width,
      height: info.height,
      bytes: read.bytes.length,
    })
  }
  return images
}

/** The images a tool result names: an execution's `images`, and image items of an MCP result kept as files. */
export function resultImages(output: unknown): ToolImage[] {
  if (!output || typeof output !== 'object' || Array.isArray(output)) return []
  const record = output as { images?: unknown; content?: unknown }
  const listed = [
    ...(Array.isArray(record.images) ? record.images : []),
    ...(Array.isArray(record.content)
      ? record.content.filter((item) => (item as { type?: unknown })?.type === 'image')
      : []),
  ]
  return listed
    .flatMap((item): ToolImage[] => {
      const image = item as Partial<ToolImage> & { mimeType?: unknown }
      const mediaType = typeof image.mediaType === 'string' ? image.mediaType : image.mimeType
      if (typeof image.path !== 'string' || typeof mediaType !== 'string') return []
      return [
        {
          path: image.path,
          mediaType,
          width: Number(image.width) || 0,
          height: Number(image.height) || 0,
          bytes: Number(image.bytes) || 0,
        },
      ]
    })
    .slice(0, maxImages)
}

const extensions: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'image/gif': 'gif',
}

/**
 * Keeps an image a tool returned inline (an MCP tool's image content) as a file of the conversation,
 * `.tool-images/<hash>.<ext>`; undefined when the bytes are not an image within the limits.
 */
export function toolImageKeeper(
  workdirs: WorkDirectories,
): (conversationId: string, bytes: Buffer) => Promise<ToolImage | undefined> {
  return async (conversationId, bytes) => {
    const info = probeImage(bytes)
    if (!info || bytes.length > maxBytes || info.width > maxSide || info.height > maxSide) return undefined
    const name = `.tool-images/${createHash('sha256').update(bytes).digest('hex').slice(0, 24)}.${extensions[info.mediaType]}`
    const written = await workdirs.write(conversationId, name, bytes)
    return {
      path: written.path,
      mediaType: info.mediaType,
      width: info.width,
      height: info.height,
      bytes: bytes.length,
    }
  }
}
