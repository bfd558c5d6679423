import { describe, expect, it } from 'vitest'
import { holdsControls, shown } from '../src/chat/terminal-text.js'

// What `plinth chat` prints of the server's text: nothing a terminal would act on (docs/reference/cli.md).
describe('plinth chat: text made safe for the terminal', () => {
  it('escapes C0, DEL and C1 controls and keeps tabs, line breaks and any other text', () => {
    expect(shown('a\u001b[2Jb\rc\u0007d\u007fe\u009bf\tg\nh 中文 ✓')).toBe(
      'a\\x1b[2Jb\\rc\\x07d\\x7fe\\x9bf\tg\nh 中文 ✓',
    )
  })

  it('escapes the bidirectional overrides and isolates that reorder a line', () => {
    expect(shown('rm -rf /\u202e txt.exe\u2066x\u2069')).toBe('rm -rf /\\u202e txt.exe\\u2066x\\u2069')
  })

  it('a one-line field shows its line breaks escaped, so it cannot fake the next line of a prompt', () => {
    expect(shown('harmless\n    risk: low', { oneLine: true })).toBe('harmless\\n    risk: low')
  })

  it('says whether a command holds controls: line breaks and tabs are not', () => {
    expect(holdsControls('for f in *; do\n\techo "$f"\ndone')).toBe(false)
    expect(holdsControls('touch x #\u001b[2K\r  $ echo hello')).toBe(true)
    expect(holdsControls('echo \u202e')).toBe(true)
  })
})
