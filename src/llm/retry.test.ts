import { describe, expect, it } from 'vitest'
import { ModelError, type LanguageModel, type ModelRequest, type StreamPart } from './model.js'
import { streamWithRetries } from './retry.js'

/** One scripted attempt: parts to yield, then (optionally) an error to throw. */
interface Attempt {
  parts?: StreamPart[]
  error?: Error
}

/** A LanguageModel that plays one attempt per `stream` call and counts the calls. */
class FlakyModel implements LanguageModel {
  readonly id = 'flaky'
  readonly provider = 'scripted' as const
  readonly supportsTools = true
  readonly contextWindow = 1000
  calls = 0
  constructor(private readonly attempts: Attempt[]) {}

  async *stream(): AsyncGenerator<StreamPart> {
    const attempt = this.attempts[this.calls++] ?? {}
    for (const part of attempt.parts ?? []) yield part
    if (attempt.error) throw attempt.error
  }
}

const request: ModelRequest = { messages: [{ role: 'user', content: 'hi' }], tools: [] }
const answer: StreamPart[] = [
  { type: 'text-delta', text: 'ok' },
  { type: 'finish', reason: 'stop' },
]
const overloaded = (retryAfterMs?: number): ModelError =>
  new ModelError('upstream_error', 'HTTP 503', { upstreamStatus: 503, isRetryable: true, retryAfterMs })

async function collect(stream: AsyncIterable<StreamPart>): Promise<StreamPart[]> {
  const parts: StreamPart[] = []
  for await (const part of stream) parts.push(part)
  return parts
}

function recordingSleep(): { sleep: (ms: number) => Promise<void>; waits: number[] } {
  const waits: number[] = []
  return { waits, sleep: async (ms) => void waits.push(ms) }
}

describe('streamWithRetries', () => {
  it('retries retryable errors thrown before anything was yielded, with exponential full-jitter backoff', async () => {
    const model = new FlakyModel([
      { error: overloaded() },
      { error: overloaded() },
      { error: overloaded() },
      { parts: answer },
    ])
    const { sleep, waits } = recordingSleep()
    const retries: number[] = []
    const parts = await collect(
      streamWithRetries(model, request, { sleep, random: () => 0.5, onRetry: ({ attempt }) => retries.push(attempt) }),
    )
    expect(parts).toEqual(answer)
    expect(model.calls).toBe(4)
    // random 0.5 × min(8000, 250 × 2^n)
    expect(waits).toEqual([125, 250, 500])
    expect(retries).toEqual([1, 2, 3])
  })

  it('caps the backoff at maxDelayMs and jitters over the whole range', async () => {
    const model = new FlakyModel([{ error: overloaded() }, { error: overloaded() }, { parts: answer }])
    const { sleep, waits } = recordingSleep()
    await collect(
      streamWithRetries(model, request, { sleep, random: () => 0.999, baseDelayMs: 1000, maxDelayMs: 1500 }),
    )
    expect(waits).toEqual([999, 1498])
    const low = recordingSleep()
    await collect(
      streamWithRetries(new FlakyModel([{ error: overloaded() }, { parts: answer }]), request, {
        sleep: low.sleep,
        random: () => 0,
      }),
    )
    expect(low.waits).toEqual([0])
  })

  it('gives up after maxRetries and rethrows the last error', async () => {
    const last = overloaded()
    const model = new FlakyModel([{ error: overloaded() }, { error: overloaded() }, { error: last }])
    const { sleep } = recordingSleep()
    await expect(collect(streamWithRetries(model, request, { sleep, maxRetries: 2 }))).rejects.toBe(last)
    expect(model.calls).toBe(3)
  })

  it('honours retryAfterMs up to 4 × maxDelayMs', async () => {
    const model = new FlakyModel([{ error: overloaded(3000) }, { error: overloaded(32_000) }, { parts: answer }])
    const { sleep, waits } = recordingSleep()
    await collect(streamWithRetries(model, request, { sleep, maxDelayMs: 8000 }))
    expect(waits).toEqual([3000, 32_000])
  })

  it('does not retry when the upstream asks for a longer wait: it fails at once, saying so', async () => {
    const model = new FlakyModel([{ error: overloaded(3_600_000) }, { parts: answer }])
    const { sleep, waits } = recordingSleep()
    const failure = await collect(streamWithRetries(model, request, { sleep, maxDelayMs: 8000 })).catch(
      (error: unknown) => error,
    )
    expect(failure).toBeInstanceOf(ModelError)
    expect(failure).toMatchObject({ code: 'upstream_error', upstreamStatus: 503, retryAfterMs: 3_600_000 })
    expect((failure as ModelError).message).toContain('asks to retry in 3600 s')
    expect(waits).toEqual([])
    expect(model.calls).toBe(1)
  })

  it('never retries once a part was yielded', async () => {
    const cut = overloaded()
    const model = new FlakyModel([{ parts: [{ type: 'text-delta', text: 'half' }], error: cut }, { parts: answer }])
    const { sleep, waits } = recordingSleep()
    const seen: StreamPart[] = []
    await expect(
      (async () => {
        for await (const part of streamWithRetries(model, request, { sleep })) seen.push(part)
      })(),
    ).rejects.toBe(cut)
    expect(seen).toEqual([{ type: 'text-delta', text: 'half' }])
    expect(model.calls).toBe(1)
    expect(waits).toEqual([])
  })

  it('does not retry non-retryable errors or errors that are not ModelErrors', async () => {
    const { sleep } = recordingSleep()
    const toolsUnsupported = new ModelError('tools_unsupported', 'no tools', { upstreamStatus: 400 })
    const model = new FlakyModel([{ error: toolsUnsupported }])
    await expect(collect(streamWithRetries(model, request, { sleep }))).rejects.toBe(toolsUnsupported)
    expect(model.calls).toBe(1)
    const bug = new TypeError('bug')
    const buggy = new FlakyModel([{ error: bug }])
    await expect(collect(streamWithRetries(buggy, request, { sleep }))).rejects.toBe(bug)
    expect(buggy.calls).toBe(1)
  })

  it('stops waiting and throws cancelled when the signal aborts during a backoff', async () => {
    const controller = new AbortController()
    const model = new FlakyModel([{ error: overloaded(30_000) }, { parts: answer }])
    const started = Date.now()
    setTimeout(() => controller.abort(), 30)
    await expect(collect(streamWithRetries(model, { ...request, signal: controller.signal }))).rejects.toMatchObject({
      code: 'cancelled',
    })
    expect(Date.now() - started).toBeLessThan(5_000)
    expect(model.calls).toBe(1)
  })

  it('does not retry when the signal is already aborted', async () => {
    const model = new FlakyModel([{ error: overloaded() }, { parts: answer }])
    const { sleep } = recordingSleep()
    await expect(
      collect(streamWithRetries(model, { ...request, signal: AbortSignal.abort() }, { sleep })),
    ).rejects.toMatchObject({ code: 'upstream_error' })
    expect(model.calls).toBe(1)
  })

  it('passes a clean stream through untouched', async () => {
    const model = new FlakyModel([{ parts: answer }])
    expect(await collect(streamWithRetries(model, request))).toEqual(answer)
    expect(model.calls).toBe(1)
  })
})
