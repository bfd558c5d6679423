/**
 * The child process that parses untrusted documents (docs/security.md, "untrusted documents"): it
 * takes one job at a time over IPC — a document's bytes and format, or a text — and answers with the
 * text and its chunks. It runs with a capped heap and is killed by its parent on a time or memory
 * limit, so a hostile document costs this process, never the server.
 */
import { readFile } from 'node:fs/promises'
import { chunkMarkdown } from './chunker.js'
import { ExtractError, extractText, type ExtractLimits, type SourceFormat } from './extract.js'
import { cleanText } from './text.js'

/** A job the parent sends. */
export interface ExtractJob {
  id: number
  format: SourceFormat | null
  /** The document (with `format`) — its bytes, or the file they wait in — or the text to chunk (`format` null). */
  bytes: Uint8Array | null
  path: string | null
  text: string | null
  limits: ExtractLimits
}

/** The answer to a job. */
export type ExtractAnswer =
  | { id: number; ok: true; text: string; pieces: Array<{ seq: number; heading: string; text: string }> }
  | { id: number; ok: false; error: string; expected: boolean }

async function handle(job: ExtractJob): Promise<ExtractAnswer> {
  try {
    let text: string
    if (job.text !== null) {
      text = cleanText(job.text)
      if (text.length > job.limits.maxChars)
        throw new ExtractError(`the text is longer than ${job.limits.maxChars.toLocaleString('en')} characters`)
    } else {
      const bytes = job.bytes ?? (job.path ? await readFile(job.path).catch(() => null) : null)
      if (!job.format || !bytes) throw new ExtractError('the upload is missing or of an unsupported type')
      text = await extractText(job.format, bytes, job.limits)
    }
    return { id: job.id, ok: true, text, pieces: chunkMarkdown(text) }
  } catch (error) {
    const expected = error instanceof ExtractError
    return {
      id: job.id,
      ok: false,
      expected,
      error: expected ? error.message : `the parser failed: ${(error as Error).message ?? String(error)}`.slice(0, 500),
    }
  }
}

process.on('message', (job: ExtractJob) => {
  void handle(job).then((answer) => process.send?.(answer))
})
process.on('disconnect', () => process.exit(0))
