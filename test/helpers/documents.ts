import { Document, HeadingLevel, Packer, Paragraph, TextRun } from 'docx'
import PDFDocument from 'pdfkit'

/** A real PDF (made with pdfkit) with one line of text per page. */
export async function makePdf(pages: string[]): Promise<Buffer> {
  const document = new PDFDocument()
  const chunks: Buffer[] = []
  document.on('data', (chunk: Buffer) => chunks.push(chunk))
  const done = new Promise<void>((resolve) => document.on('end', () => resolve()))
  pages.forEach((text, index) => {
    if (index > 0) document.addPage()
    document.fontSize(12).text(text)
  })
  document.end()
  await done
  return Buffer.concat(chunks)
}

/** A real DOCX (made with the docx package): a heading and paragraphs. */
export async function makeDocx(heading: string, paragraphs: string[]): Promise<Buffer> {
  const document = new Document({
    sections: [{ children: [new Paragraph({ text: heading, heading: HeadingLevel.HEADING_1 }), ...paragraphs.map((text) => new Paragraph({ children: [new TextRun(text)] }))] }],
  })
  return Packer.toBuffer(document)
}

/** Posts a multipart upload (one file, optional title) like a browser form would. */
export async function upload(
  url: string,
  token: string,
  file: { name: string; bytes: Buffer | string; type?: string },
  title?: string,
  headers: Record<string, string> = {},
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary JSON
): Promise<{ status: number; body: any }> {
  const form = new FormData()
  if (title !== undefined) form.append('title', title)
  form.append('file', new Blob([file.bytes], { type: file.type ?? 'application/octet-stream' }), file.name)
  const response = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${token}`, ...headers }, body: form })
  const text = await response.text()
  return { status: response.status, body: text ? JSON.parse(text) : null }
}
