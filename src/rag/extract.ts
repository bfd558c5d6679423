import { createRequire } from 'node:module'
import { dirname, join, sep } from 'node:path'
import type yauzl from 'yauzl'
import { cleanText } from './text.js'

/** The file formats knowledge can be made from. */
export type SourceFormat = 'text' | 'markdown' | 'html' | 'pdf' | 'docx'

/** A file that could not be read; the message is shown on the item (`ingestError`). */
export class ExtractError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ExtractError'
  }
}

const byExtension: Record<string, SourceFormat> = {
  txt: 'text',
  text: 'text',
  md: 'markdown',
  markdown: 'markdown',
  html: 'html',
  htm: 'html',
  pdf: 'pdf',
  docx: 'docx',
}

const byMediaType: Record<string, SourceFormat> = {
  'text/plain': 'text',
  'text/markdown': 'markdown',
  'text/x-markdown': 'markdown',
  'text/html': 'html',
  'application/pdf': 'pdf',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': 'docx',
}

/** The format of an upload by its file name, else its declared media type; null when unsupported. */
export function detectFormat(filename: string | undefined, mediaType: string | undefined): SourceFormat | null {
  const extension = filename?.toLowerCase().match(/\.([a-z0-9]+)$/)?.[1]
  if (extension) return byExtension[extension] ?? null
  return mediaType ? (byMediaType[mediaType.split(';')[0]!.trim().toLowerCase()] ?? null) : null
}

const mediaTypes: Record<SourceFormat, string> = {
  text: 'text/plain',
  markdown: 'text/markdown',
  html: 'text/html',
  pdf: 'application/pdf',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
}

/** The media type a format is stored with. */
export function mediaTypeOf(format: SourceFormat): string {
  return mediaTypes[format]
}

/** Caps on what one document may make the parser do (docs/security.md, "untrusted documents"). */
export interface ExtractLimits {
  /** Characters of text a document may yield. */
  maxChars: number
  /** Pages of a PDF. */
  maxPages: number
  /** Bytes a DOCX's ZIP entries may inflate to, in all. */
  maxDecompressedBytes: number
  /** How much larger than its compressed size one ZIP entry may be. */
  maxZipRatio: number
  /** Entries of a ZIP archive. */
  maxZipEntries: number
  /** Elements nested in one another (HTML, and the HTML a DOCX becomes). */
  maxNesting: number
}

export const defaultExtractLimits: ExtractLimits = {
  maxChars: 20_000_000,
  maxPages: 2000,
  maxDecompressedBytes: 100 * 1024 * 1024,
  maxZipRatio: 200,
  maxZipEntries: 2000,
  maxNesting: 256,
}

/** The text of a file, as markdown where the format has structure (headings survive into chunks). */
export async function extractText(
  format: SourceFormat,
  bytes: Uint8Array,
  limits: ExtractLimits = defaultExtractLimits,
): Promise<string> {
  let text: string
  switch (format) {
    case 'text':
    case 'markdown':
      if (bytes.length > limits.maxChars * 4) throw tooLong(limits)
      text = new TextDecoder('utf-8').decode(bytes)
      break
    case 'html':
      text = await htmlToMarkdown(new TextDecoder('utf-8').decode(bytes), limits)
      break
    case 'pdf':
      text = await pdfText(bytes, limits)
      break
    case 'docx':
      text = await docxText(bytes, limits)
      break
  }
  if (text.length > limits.maxChars) throw tooLong(limits)
  text = cleanText(text)
    .replace(/^\uFEFF/, '')
    .trim()
  if (!text)
    throw new ExtractError(
      format === 'pdf'
        ? 'no extractable text: the PDF may be scanned images (text is not recognised in images)'
        : 'the file holds no text',
    )
  if (undecodableShare(text) > maxUndecodableShare) {
    throw new ExtractError(
      format === 'pdf'
        ? "no extractable text: the PDF's text could not be decoded (most characters came out as U+FFFD; its fonts map glyphs to no known characters)"
        : 'the file’s text could not be decoded (most characters came out as U+FFFD): save it as UTF-8',
    )
  }
  return text
}

/** Past this share of undecodable characters a document is refused rather than stored as noise. */
const maxUndecodableShare = 0.5

/** The share of a text's visible characters that are U+FFFD or control characters (what broken decoding leaves). */
function undecodableShare(text: string): number {
  // eslint-disable-next-line no-control-regex -- control characters are what is counted
  const undecodable = /[\uFFFD\u0000-\u0008\u000E-\u001F\u007F-\u009F]/g
  let bad = 0
  while (undecodable.exec(text)) bad++
  if (bad === 0) return 0
  return bad / Math.max(1, text.replace(/\s+/g, '').length)
}

function tooLong(limits: ExtractLimits): ExtractError {
  return new ExtractError(`the document's text is longer than ${limits.maxChars.toLocaleString('en')} characters`)
}

const voidElements = new Set([
  'area',
  'base',
  'br',
  'col',
  'embed',
  'hr',
  'img',
  'input',
  'link',
  'meta',
  'param',
  'source',
  'track',
  'wbr',
])

/** The deepest nesting of elements in an HTML text (a cheap scan: tags only, no parsing). */
export function htmlNestingDepth(html: string, stopAt = Infinity): number {
  let depth = 0
  let deepest = 0
  for (const match of html.matchAll(/<(\/?)([a-zA-Z][a-zA-Z0-9-]*)[^>]*?(\/?)>/g)) {
    const name = match[2]!.toLowerCase()
    if (match[1]) depth = Math.max(0, depth - 1)
    else if (!match[3] && !voidElements.has(name)) {
      depth++
      if (depth > deepest) deepest = depth
      if (deepest > stopAt) return deepest
    }
  }
  return deepest
}

// The converters load on first use, not at start: turndown brings a DOM implementation.
async function htmlToMarkdown(html: string, limits: ExtractLimits): Promise<string> {
  if (htmlNestingDepth(html, limits.maxNesting) > limits.maxNesting)
    throw new ExtractError(`the document nests elements deeper than ${limits.maxNesting} levels`)
  const [{ default: TurndownService }, { tables }] = await Promise.all([
    import('turndown'),
    import('@joplin/turndown-plugin-gfm'),
  ])
  const turndown = new TurndownService({ headingStyle: 'atx', codeBlockStyle: 'fenced', bulletListMarker: '-' })
  turndown.remove(['script', 'style', 'noscript', 'iframe', 'head', 'nav', 'aside'])
  // A page's header and footer are boilerplate; an article's or section's own are part of it (its title).
  turndown.remove(
    (node) =>
      (node.nodeName === 'HEADER' || node.nodeName === 'FOOTER') &&
      !node.parentElement?.closest('article, section, main'),
  )
  // Tables stay tables: header row, separator, rows (GitHub-flavoured Markdown).
  turndown.use(tables)
  try {
    return turndown.turndown(html)
  } catch (error) {
    if (error instanceof RangeError) throw new ExtractError('the document nests elements too deeply to convert')
    throw error
  }
}

/**
 * pdf.js's data files, shipped in its package: the packed CMaps (predefined CJK encodings such as
 * UniGB-UCS2-H, without which a Chinese, Japanese or Korean PDF using a non-embedded font yields no
 * text) and the standard fonts. Resolved from wherever the package is installed (pdf.js in Node reads
 * them as file paths, which must end with a separator).
 */
function pdfjsData(): { cMapUrl: string; standardFontDataUrl: string } {
  const root = dirname(createRequire(import.meta.url).resolve('pdfjs-dist/package.json'))
  return { cMapUrl: join(root, 'cmaps') + sep, standardFontDataUrl: join(root, 'standard_fonts') + sep }
}

async function pdfText(bytes: Uint8Array, limits: ExtractLimits): Promise<string> {
  if (!startsWith(bytes, '%PDF-')) throw new ExtractError('not a PDF file (it does not start with %PDF-)')
  const { getDocument } = await import('pdfjs-dist/legacy/build/pdf.mjs')
  let document
  try {
    // pdf.js takes ownership of the buffer it is given: hand it a copy.
    document = await getDocument({
      data: new Uint8Array(bytes),
      ...pdfjsData(),
      cMapPacked: true,
      isEvalSupported: false,
      disableFontFace: true,
      useSystemFonts: false,
      verbosity: 0,
    }).promise
  } catch (error) {
    const name = (error as Error).name
    if (name === 'PasswordException') throw new ExtractError('the PDF is encrypted with a password')
    throw new ExtractError(`the PDF could not be read: ${(error as Error).message}`)
  }
  try {
    if (document.numPages > limits.maxPages)
      throw new ExtractError(`the PDF has ${document.numPages} pages; at most ${limits.maxPages} are read`)
    const pages: string[] = []
    let length = 0
    for (let number = 1; number <= document.numPages; number++) {
      const page = await document.getPage(number)
      const content = await page.getTextContent()
      let text = ''
      for (const item of content.items) {
        if (!('str' in item)) continue
        text += item.str + (item.hasEOL ? '\n' : '')
        if (text.length + length > limits.maxChars) throw tooLong(limits)
      }
      pages.push(text.trim())
      length += text.length
      page.cleanup()
    }
    return pages.filter(Boolean).join('\n\n')
  } catch (error) {
    if (error instanceof ExtractError) throw error
    throw new ExtractError(`the PDF could not be read: ${(error as Error).message}`)
  } finally {
    await document.destroy()
  }
}

/** Checks a ZIP's directory before anything inflates it: entry count, total size, each entry's ratio. */
async function checkZip(bytes: Uint8Array, limits: ExtractLimits, what: string): Promise<void> {
  const { default: yauzl } = await import('yauzl')
  const zip = await new Promise<yauzl.ZipFile>((resolve, reject) =>
    yauzl.fromBuffer(
      Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
      { lazyEntries: true, autoClose: false },
      (error, file) => (error ? reject(error) : resolve(file)),
    ),
  ).catch((error: Error) => {
    throw new ExtractError(`the ${what} could not be read: it is not a valid ZIP archive (${error.message})`)
  })
  let entries = 0
  let total = 0
  await new Promise<void>((resolve, reject) => {
    zip.on('entry', (entry: yauzl.Entry) => {
      entries++
      total += entry.uncompressedSize
      if (entries > limits.maxZipEntries)
        return reject(new ExtractError(`the ${what} holds more than ${limits.maxZipEntries} files`))
      if (total > limits.maxDecompressedBytes)
        return reject(new ExtractError(`the ${what} would inflate to more than ${limits.maxDecompressedBytes} bytes`))
      // Tiny entries may inflate a lot (an empty file is all header); the ratio counts past 64 KiB.
      if (
        entry.uncompressedSize > 64 * 1024 &&
        entry.uncompressedSize > Math.max(1, entry.compressedSize) * limits.maxZipRatio
      ) {
        return reject(
          new ExtractError(`the ${what}'s ${entry.fileName} inflates more than ${limits.maxZipRatio}:1 (a ZIP bomb?)`),
        )
      }
      zip.readEntry()
    })
    zip.on('end', () => resolve())
    zip.on('error', (error: Error) =>
      reject(new ExtractError(`the ${what} could not be read: it is not a valid ZIP archive (${error.message})`)),
    )
    zip.readEntry()
  }).finally(() => zip.close())
}

async function docxText(bytes: Uint8Array, limits: ExtractLimits): Promise<string> {
  if (!startsWith(bytes, 'PK')) throw new ExtractError('not a DOCX file (it is not a ZIP archive)')
  await checkZip(bytes, limits, 'DOCX')
  const mammoth = (await import('mammoth')).default
  let html: string
  try {
    html = (await mammoth.convertToHtml({ buffer: Buffer.from(bytes) })).value
  } catch (error) {
    throw new ExtractError(`the DOCX could not be read: ${(error as Error).message.split('\n')[0]}`)
  }
  if (html.length > limits.maxChars * 4) throw tooLong(limits)
  return htmlToMarkdown(html, limits)
}

function startsWith(bytes: Uint8Array, prefix: string): boolean {
  if (bytes.length < prefix.length) return false
  for (let index = 0; index < prefix.length; index++) if (bytes[index] !== prefix.charCodeAt(index)) return false
  return true
}
