import { Writable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { createLogger } from '../src/app/index.js'
import { createPluginLogger } from '../src/cmdbus/index.js'

/** A logger writing into an array of parsed lines (and the raw text, for leak checks). */
function capture(secrets: string[] = []): {
  logger: ReturnType<typeof createLogger>
  lines: () => Array<Record<string, unknown>>
  raw: string[]
} {
  const raw: string[] = []
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      raw.push(...chunk.toString('utf8').split('\n').filter(Boolean))
      done()
    },
  })
  const logger = createLogger('debug', sink, secrets)
  return {
    logger,
    raw,
    lines: () => raw.map((line) => JSON.parse(line) as Record<string, unknown>),
  }
}

describe('errors in log lines', () => {
  it('are logged as err, with their type, message and stack, through a plugin logger too', () => {
    const { logger, lines } = capture()
    const log = createPluginLogger(logger, 'runmgr')
    const failure = new TypeError('the row could not be read', { cause: new Error('connection reset') })
    log.error('run loop failed', { runId: 'r1', err: failure })
    const [line] = lines()
    expect(line).toMatchObject({ level: 50, msg: 'run loop failed', plugin: 'runmgr', runId: 'r1' })
    const err = line?.err as { type: string; message: string; stack: string }
    expect(err.type).toBe('TypeError')
    expect(err.message).toContain('the row could not be read')
    // The stack names where the error was made, and the cause's too.
    expect(err.stack).toMatch(/^TypeError: the row could not be read\n\s+at /)
    expect(err.stack).toContain('logger.test.ts')
    expect(err.stack).toContain('caused by: Error: connection reset')
  })

  it('keeps a thrown non-Error as it is', () => {
    const { logger, lines } = capture()
    createPluginLogger(logger, 'rag').warn('ingestion failed', { err: 'a plain string' })
    expect(lines()[0]).toMatchObject({ err: 'a plain string' })
  })

  it('are scrubbed of credentials in the message, the stack and the causes', () => {
    const configured = 'configured-secret-0123456789'
    const { logger, raw, lines } = capture([configured])
    const leaks = [
      'pgpassword1',
      'hunter2pass',
      'queryToken123',
      'apikeyvalue9',
      configured,
      'sk-abcdefghijklmnop',
      'plt_abcdefghijklmnopqrstuvwxyz',
    ]
    const cause = new Error(
      `fetch https://bob:hunter2pass@api.example/v1?access_token=queryToken123&page=2 failed (${configured})`,
    )
    const failure = new Error(
      `connect postgres://plinth:pgpassword1@db:5432/plinth: refused; key sk-abcdefghijklmnop; token plt_abcdefghijklmnopqrstuvwxyz; https://h.example/x?api_key=apikeyvalue9`,
      { cause },
    )
    createPluginLogger(logger, 'mcp').warn('MCP tools could not be listed again', { err: failure })
    expect(raw).toHaveLength(1)
    for (const secret of leaks) expect(raw[0], `${secret.slice(0, 6)}… leaked`).not.toContain(secret)
    const err = lines()[0]?.err as { message: string; stack: string }
    // What is not a credential stays readable.
    expect(err.message).toContain('postgres://plinth:[redacted]@db:5432/plinth')
    expect(err.message).toContain('https://bob:[redacted]@api.example/v1?access_token=[redacted]&page=2')
    expect(err.stack).toContain('?api_key=[redacted]')
  })

  it('leave a URL with a port and no password alone', () => {
    const { logger, lines } = capture()
    logger.warn({ err: new Error('GET https://host.example:8443/users/@me?page=2 answered 500') }, 'upstream failed')
    expect((lines()[0]?.err as { message: string }).message).toBe(
      'GET https://host.example:8443/users/@me?page=2 answered 500',
    )
  })
})
