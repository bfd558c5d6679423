/**
 * What an image really is, from its first bytes (never from the name or the declared type), and its
 * size in pixels: PNG, JPEG, WebP and GIF, the formats every vision model takes.
 */
export type ImageMediaType = 'image/png' | 'image/jpeg' | 'image/webp' | 'image/gif'

export interface ImageInfo {
  mediaType: ImageMediaType
  width: number
  height: number
}

export const imageMediaTypes: readonly ImageMediaType[] = ['image/png', 'image/jpeg', 'image/webp', 'image/gif']

/** The image's type and dimensions; undefined when the bytes are none of the four formats (or cut short). */
export function probeImage(bytes: Buffer): ImageInfo | undefined {
  if (bytes.length >= 24 && bytes.readUInt32BE(0) === 0x89504e47 && bytes.readUInt32BE(4) === 0x0d0a1a0a)
    return { mediaType: 'image/png', width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) }
  if (bytes.length >= 10 && bytes.toString('latin1', 0, 4) === 'GIF8')
    return { mediaType: 'image/gif', width: bytes.readUInt16LE(6), height: bytes.readUInt16LE(8) }
  if (bytes.length >= 30 && bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WEBP')
    return webp(bytes)
  if (bytes.length >= 4 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return jpeg(bytes)
  return undefined
}

function webp(bytes: Buffer): ImageInfo | undefined {
  const chunk = bytes.toString('latin1', 12, 16)
  if (chunk === 'VP8X')
    return {
      mediaType: 'image/webp',
      width: 1 + bytes.readUIntLE(24, 3),
      height: 1 + bytes.readUIntLE(27, 3),
    }
  if (chunk === 'VP8 ')
    return { mediaType: 'image/webp', width: bytes.readUInt16LE(26) & 0x3fff, height: bytes.readUInt16LE(28) & 0x3fff }
  if (chunk === 'VP8L') {
    const bits = bytes.readUInt32LE(21)
    return { mediaType: 'image/webp', width: 1 + (bits & 0x3fff), height: 1 + ((bits >> 14) & 0x3fff) }
  }
  return undefined
}

/** Walks the JPEG markers to the first start-of-frame, which holds the dimensions. */
function jpeg(bytes: Buffer): ImageInfo | undefined {
  let at = 2
  while (at + 9 < bytes.length) {
    if (bytes[at] !== 0xff) return undefined
    const marker = bytes[at + 1]!
    // Padding, and markers without a length.
    if (marker === 0xff) {
      at++
      continue
    }
    if (marker === 0xd8 || (marker >= 0xd0 && marker <= 0xd7) || marker === 0x01) {
      at += 2
      continue
    }
    const length = bytes.readUInt16BE(at + 2)
    const startOfFrame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc
    if (startOfFrame)
      return { mediaType: 'image/jpeg', height: bytes.readUInt16BE(at + 5), width: bytes.readUInt16BE(at + 7) }
    at += 2 + length
  }
  return undefined
}
