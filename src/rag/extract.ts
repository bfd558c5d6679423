import TurndownService from 'turndown'
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

/** The text of a file, as markdown where the format has structure (headings survive into chunks). */
export async function extractText(format: SourceFormat, bytes: Uint8Array): Promise<string> {
  let text: string
  switch (format) {
    case 'text':
    case 'markdown':
      text = new TextDecoder('utf-8').decode(bytes)
      break
    case 'html':
      text = htmlToMarkdown(new TextDecoder('utf-8').decode(bytes))
      break
    case 'pdf':
      text = await pdfText(bytes)
      break
    case 'docx':
      text = await docxText(bytes)
      break
  }
  text = cleanText(text).replace(/^\uFEFF/, '').trim()
  if (!text) throw new ExtractError(format === 'pdf' ? 'the PDF holds no extractable text (a scanned image?)' : 'the file holds no text')
  return text
}

function htmlToMarkdown(html: string): string {
  const turndown = new TurndownService({ headingStyle: 'atx', codeBlockStyle: 'fenced', bulletListMarker: '-' })
  turndown.remove(['script', 'style', 'noscript', 'iframe', 'head'])
  return turndown.turndown(html)
}

async function pdfText(bytes: Uint8Array): Promise<string> {
  if (!startsWith(bytes, '%PDF-')) throw new ExtractError('not a PDF file (it does not start with %PDF-)')
  const { getDocument } = await import('pdfjs-dist/legacy/build/pdf.mjs')
  let document
  try {
    // pdf.js takes ownership of the buffer it is given: hand it a copy.
    document = await getDocument({ data: new Uint8Array(bytes), isEvalSupported: false, disableFontFace: true, useSystemFonts: false, verbosity: 0 }).promise
  } catch (error) {
    const name = (error as Error).name
    if (name === 'PasswordException') throw new ExtractError('the PDF is encrypted with a password')
    throw new ExtractError(`the PDF could not be read: ${(error as Error).message}`)
  }
  try {
    const pages: string[] = []
    for (let number = 1; number <= document.numPages; number++) {
      const page = await document.getPage(number)
      const content = await page.getTextContent()
      let text = ''
      for (const item of content.items) {
        if (!('str' in item)) continue
        text += item.str + (item.hasEOL ? '\n' : '')
      }
      pages.push(text.trim())
      page.cleanup()
    }
    return pages.filter(Boolean).join('\n\n')
  } catch (error) {
    throw new ExtractError(`the PDF could not be read: ${(error as Error).message}`)
  } finally {
    await document.destroy()
  }
}

async function docxText(bytes: Uint8Array): Promise<string> {
  if (!startsWith(bytes, 'PK')) throw new ExtractError('not a DOCX file (it is not a ZIP archive)')
  const mammoth = (await import('mammoth')).default
  try {
    const { value } = await mammoth.convertToHtml({ buffer: Buffer.from(bytes) })
    return htmlToMarkdown(value)
  } catch (error) {
    throw new ExtractError(`the DOCX could not be read: ${(error as Error).message.split('\n')[0]}`)
  }
}

function startsWith(bytes: Uint8Array, prefix: string): boolean {
  if (bytes.length < prefix.length) return false
  for (let index = 0; index < prefix.length; index++) if (bytes[index] !== prefix.charCodeAt(index)) return false
  return true
}
