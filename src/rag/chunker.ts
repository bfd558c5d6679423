/** One piece of an item as it is indexed: its heading path (`A > B`) and its text. */
export interface TextChunk {
  seq: number
  heading: string
  text: string
}

export interface ChunkOptions {
  /** Target chunk length in characters. */
  size: number
  /** Characters of the previous chunk repeated at the start of the next (same section only). */
  overlap: number
}

const defaults: ChunkOptions = { size: 800, overlap: 120 }
const headingLine = /^(#{1,6})\s+(.+?)\s*#*\s*$/
const fenceLine = /^\s*(```|~~~)/
const sentenceEnd = /(?<=[.!?。！？；;])\s+|(?<=[。！？])/u

/**
 * Splits markdown into chunks of about `size` characters along its structure: a chunk never spans two
 * sections, carries the heading path of its section, prefers paragraph and then sentence boundaries,
 * keeps fenced code blocks whole where they fit, and repeats the tail of the previous chunk of the
 * same section (`overlap`) so a passage cut in two is still found whole.
 */
export function chunkMarkdown(markdown: string, options: Partial<ChunkOptions> = {}): TextChunk[] {
  const { size, overlap } = { ...defaults, ...options }
  const chunks: TextChunk[] = []
  for (const section of sections(markdown.replace(/\r\n?/g, '\n'))) {
    let current = ''
    const emit = (): void => {
      const text = current.trim()
      if (text) chunks.push({ seq: chunks.length, heading: section.heading, text })
    }
    for (const piece of section.paragraphs.flatMap((paragraph) => splitLong(paragraph, size))) {
      if (current && current.length + 2 + piece.length > size) {
        emit()
        current = tail(current, overlap)
      }
      current = current ? `${current}\n\n${piece}` : piece
    }
    emit()
  }
  return chunks
}

interface Section {
  heading: string
  paragraphs: string[]
}

function sections(markdown: string): Section[] {
  const result: Section[] = []
  const stack: string[] = []
  let paragraphs: string[] = []
  let paragraph: string[] = []
  let fence: string | null = null
  const closeParagraph = (): void => {
    const text = paragraph.join('\n').trim()
    if (text) paragraphs.push(text)
    paragraph = []
  }
  const closeSection = (): void => {
    closeParagraph()
    if (paragraphs.length > 0) result.push({ heading: stack.filter(Boolean).join(' > '), paragraphs })
    paragraphs = []
  }
  for (const line of markdown.split('\n')) {
    const fenceMatch = fenceLine.exec(line)
    if (fence) {
      paragraph.push(line)
      if (fenceMatch?.[1] === fence) {
        fence = null
        closeParagraph()
      }
      continue
    }
    if (fenceMatch) {
      closeParagraph()
      fence = fenceMatch[1]!
      paragraph.push(line)
      continue
    }
    const heading = headingLine.exec(line)
    if (heading) {
      closeSection()
      const level = heading[1]!.length
      stack.length = level - 1
      stack[level - 1] = heading[2]!
      continue
    }
    if (line.trim() === '') closeParagraph()
    else paragraph.push(line)
  }
  closeSection()
  return result
}

/** A paragraph longer than `size`, cut at sentence ends, then (for a very long sentence) at `size`. */
function splitLong(paragraph: string, size: number): string[] {
  if (paragraph.length <= size) return [paragraph]
  const pieces: string[] = []
  let current = ''
  for (const sentence of paragraph.split(sentenceEnd).flatMap((part) => part.split('\n'))) {
    for (const part of hardSplit(sentence, size)) {
      if (current && current.length + 1 + part.length > size) {
        pieces.push(current)
        current = ''
      }
      current = current ? `${current} ${part}` : part
    }
  }
  if (current) pieces.push(current)
  return pieces
}

function hardSplit(text: string, size: number): string[] {
  const chars = [...text]
  if (chars.length <= size) return text ? [text] : []
  const parts: string[] = []
  for (let start = 0; start < chars.length; start += size) parts.push(chars.slice(start, start + size).join(''))
  return parts
}

/** The last `length` characters, starting at a word or sentence boundary when there is one. */
function tail(text: string, length: number): string {
  if (length <= 0 || text.length <= length) return length <= 0 ? '' : text
  const cut = text.slice(text.length - length)
  const boundary = cut.search(/[\s。！？，,;；]/u)
  return (boundary >= 0 && boundary < cut.length - 1 ? cut.slice(boundary + 1) : cut).trim()
}
