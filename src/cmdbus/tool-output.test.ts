import { describe, expect, it } from 'vitest'
import { capForModel } from './tool-output.js'

describe('capForModel', () => {
  it('passes short output through', () => {
    expect(capForModel('short', 4096)).toEqual({ text: 'short', truncated: false })
  })

  it('cuts at the byte limit on a code-point boundary with a trailer naming the totals', () => {
    const text = `${'é'.repeat(3000)}\nline two\n😀😀`
    const capped = capForModel(text, 4096)
    expect(capped.truncated).toBe(true)
    const body = capped.text.split('\n... [TRUNCATED')[0]!
    expect(Buffer.byteLength(body)).toBeLessThanOrEqual(4096)
    expect(body).not.toContain('\uFFFD')
    expect(capped.text).toMatch(
      new RegExp(`\\.\\.\\. \\[TRUNCATED, total=${Buffer.byteLength(text)} bytes, 3 lines\\]$`),
    )
  })

  it('never splits a 4-byte character', () => {
    const capped = capForModel('😀'.repeat(10), 6)
    expect(capped.text.startsWith('😀\n')).toBe(true)
  })
})
