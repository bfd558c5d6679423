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
    sections: [
      {
        children: [
          new Paragraph({ text: heading, heading: HeadingLevel.HEADING_1 }),
          ...paragraphs.map((text) => new Paragraph({ children: [new TextRun(text)] })),
        ],
      },
    ],
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
  const response = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, ...headers },
    body: form,
  })
  const text = await response.text()
  return { status: response.status, body: text ? JSON.parse(text) : null }
}

/**
 * A PDF written object by object (with a correct xref table): `objects[i]` becomes object i + 1, the
 * first being the catalog. A stream object is `{ dict, stream }` (its /Length is added).
 */
export function rawPdf(objects: Array<string | { dict: string; stream: Buffer | string }>): Buffer {
  const parts: Buffer[] = [Buffer.from('%PDF-1.4\n%\xE2\xE3\xCF\xD3\n', 'latin1')]
  let length = parts[0]!.length
  const offsets: number[] = []
  objects.forEach((object, index) => {
    offsets.push(length)
    const body =
      typeof object === 'string'
        ? [Buffer.from(`${index + 1} 0 obj\n${object}\nendobj\n`)]
        : [
            Buffer.from(`${index + 1} 0 obj\n<<${object.dict}/Length ${Buffer.byteLength(object.stream)}>>\nstream\n`),
            Buffer.from(object.stream),
            Buffer.from('\nendstream\nendobj\n'),
          ]
    for (const part of body) {
      parts.push(part)
      length += part.length
    }
  })
  const xref = `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n${offsets.map((offset) => `${String(offset).padStart(10, '0')} 00000 n \n`).join('')}`
  parts.push(Buffer.from(`${xref}trailer\n<</Size ${objects.length + 1}/Root 1 0 R>>\nstartxref\n${length}\n%%EOF\n`))
  return Buffer.concat(parts)
}

/**
 * A PDF like older Chinese office and government documents: the Chinese is shown with a Type0 font
 * using the predefined CMap UniGB-UCS2-H over the non-embedded STSong-Light (Adobe-GB1), as 2-byte
 * UCS-2 codes, with a line of Latin text (Helvetica) before it.
 */
export function makeCjkPdf(latin: string, chinese: string): Buffer {
  const ucs2 = [...chinese].map((char) => char.codePointAt(0)!.toString(16).padStart(4, '0').toUpperCase()).join('')
  const content = `BT /F2 12 Tf 72 720 Td (${latin}) Tj ET\nBT /F1 24 Tf 72 680 Td <${ucs2}> Tj ET\n`
  return rawPdf([
    '<</Type/Catalog/Pages 2 0 R>>',
    '<</Type/Pages/Kids[3 0 R]/Count 1>>',
    '<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R/Resources<</Font<</F1 5 0 R/F2 8 0 R>>>>>>',
    { dict: '', stream: content },
    '<</Type/Font/Subtype/Type0/BaseFont/STSong-Light-UniGB-UCS2-H/Encoding/UniGB-UCS2-H/DescendantFonts[6 0 R]>>',
    '<</Type/Font/Subtype/CIDFontType0/BaseFont/STSong-Light/CIDSystemInfo<</Registry(Adobe)/Ordering(GB1)/Supplement 4>>/FontDescriptor 7 0 R/DW 1000>>',
    '<</Type/FontDescriptor/FontName/STSong-Light/Flags 6/FontBBox[-25 -254 1000 880]/ItalicAngle 0/Ascent 880/Descent -120/CapHeight 880/StemV 93>>',
    '<</Type/Font/Subtype/Type1/BaseFont/Helvetica/Encoding/WinAnsiEncoding>>',
  ])
}

/** A PDF of one page holding only an image (a scan): no text to extract. */
export function makeImageOnlyPdf(): Buffer {
  // An 8×8 grey image, uncompressed.
  const pixels = Buffer.alloc(64, 0x80)
  return rawPdf([
    '<</Type/Catalog/Pages 2 0 R>>',
    '<</Type/Pages/Kids[3 0 R]/Count 1>>',
    '<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R/Resources<</XObject<</Im1 5 0 R>>>>>>',
    { dict: '', stream: 'q 500 0 0 700 56 46 cm /Im1 Do Q\n' },
    { dict: '/Type/XObject/Subtype/Image/Width 8/Height 8/ColorSpace/DeviceGray/BitsPerComponent 8', stream: pixels },
  ])
}

/** A PDF whose only font maps every code to U+FFFD (a broken ToUnicode CMap): its text cannot be decoded. */
export function makeUndecodablePdf(): Buffer {
  const text = 'Quarterly figures for the board'
  const codes = [...new Set(text)].map((char) => `<${char.charCodeAt(0).toString(16).padStart(2, '0')}> <FFFD>`)
  const toUnicode = `/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Broken def 1 begincodespacerange <00> <FF> endcodespacerange ${codes.length} beginbfchar ${codes.join(' ')} endbfchar endcmap CMapName currentdict /CMap defineresource pop end end`
  return rawPdf([
    '<</Type/Catalog/Pages 2 0 R>>',
    '<</Type/Pages/Kids[3 0 R]/Count 1>>',
    '<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R/Resources<</Font<</F1 5 0 R>>>>>>',
    { dict: '', stream: `BT /F1 12 Tf 72 720 Td (${text}) Tj ET\n` },
    '<</Type/Font/Subtype/Type1/BaseFont/Helvetica/ToUnicode 6 0 R>>',
    { dict: '', stream: toUnicode },
  ])
}
