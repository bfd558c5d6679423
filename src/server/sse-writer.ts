import type { ServerResponse } from 'node:http'
import { eventDataJson, type EventRecord } from '../store/index.js'

const frames = new WeakMap<EventRecord, Buffer>()

/**
 * An event as one SSE frame (`id:`, `event:`, `data:`), encoded once per record however many
 * streams send it. JSON never contains a raw newline, so `data:` is a single line.
 */
export function eventFrame(event: EventRecord): Buffer {
  let frame = frames.get(event)
  if (!frame) {
    frame = Buffer.from(`id: ${event.id}\nevent: ${event.type}\ndata: ${eventDataJson(event)}\n\n`)
    frames.set(event, frame)
  }
  return frame
}

/** A frame that is not a logged event (no `id:`, so it does not move the client's Last-Event-ID). */
export function controlFrame(type: string, data: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`
}

export type WriteOutcome = 'written' | 'closed' | 'stalled' | 'aborted'

/**
 * Writes SSE frames to a response with backpressure, and never waits for ever: a write that does
 * not drain races the response's `close`, an abort signal, and a drain deadline; a client that has
 * not drained within the deadline is dropped (its socket destroyed), so a stalled reader holds
 * nothing after that.
 */
export class SseWriter {
  readonly #raw: ServerResponse
  readonly #drainTimeoutMs: number
  #closed = false
  #corked = false
  #written = false

  constructor(raw: ServerResponse, drainTimeoutMs: number) {
    this.#raw = raw
    this.#drainTimeoutMs = drainTimeoutMs
    raw.once('close', () => {
      this.#closed = true
    })
  }

  /** False once the client has gone (or was dropped). */
  get open(): boolean {
    return !this.#closed && !this.#raw.destroyed && !this.#raw.writableEnded
  }

  /** Bytes accepted but not yet taken by the client. */
  get pending(): number {
    return this.#raw.writableLength
  }

  /**
   * Makes sure the headers leave soon even when no frame does: with nothing to replay, the first
   * event or heartbeat may be a long way off, and a client waits for the headers to count itself
   * connected. A frame written before then carries them (one socket write instead of two).
   */
  sendHeadersSoon(delayMs = 20): void {
    setTimeout(() => {
      if (this.open && this.#raw.writableLength === 0 && !this.#written) this.#raw.flushHeaders()
    }, delayMs).unref()
  }

  async write(
    frame: Buffer | string,
    signal?: AbortSignal,
    drainTimeoutMs = this.#drainTimeoutMs,
  ): Promise<WriteOutcome> {
    if (!this.open) return 'closed'
    this.#written = true
    // Frames written in one turn of the event loop (a commit's events arrive together) leave in one
    // socket write instead of one each.
    if (!this.#corked) {
      this.#corked = true
      this.#raw.cork()
      setImmediate(() => this.#uncork())
    }
    if (this.#raw.write(frame)) return 'written'
    const outcome = await this.#waitForDrain(signal, drainTimeoutMs)
    if (outcome === 'stalled') this.drop()
    return outcome
  }

  /** Ends the response; a client that still has not taken what was written is dropped instead. */
  end(): void {
    this.#uncork()
    if (!this.open) return
    if (this.#raw.writableNeedDrain) this.drop()
    else this.#raw.end()
  }

  #uncork(): void {
    if (!this.#corked) return
    this.#corked = false
    if (!this.#raw.destroyed) this.#raw.uncork()
  }

  drop(): void {
    this.#closed = true
    this.#raw.destroy()
  }

  #waitForDrain(signal: AbortSignal | undefined, timeoutMs: number): Promise<WriteOutcome> {
    return new Promise((resolve) => {
      const raw = this.#raw
      const finish = (outcome: WriteOutcome): void => {
        clearTimeout(timer)
        raw.off('drain', onDrain)
        raw.off('close', onClose)
        signal?.removeEventListener('abort', onAbort)
        resolve(outcome)
      }
      const onDrain = (): void => finish('written')
      const onClose = (): void => finish('closed')
      const onAbort = (): void => finish('aborted')
      const timer = setTimeout(() => finish('stalled'), timeoutMs)
      raw.on('drain', onDrain)
      raw.on('close', onClose)
      if (signal?.aborted) return finish('aborted')
      signal?.addEventListener('abort', onAbort)
      if (raw.destroyed) finish('closed')
    })
  }
}
