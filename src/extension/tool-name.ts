import { createHash } from 'node:crypto'

/**
 * The tool name a command is offered under: every `.` becomes `__` (one-to-one, since ids never
 * contain `__`); past 64 characters it is cut at a segment boundary and suffixed `_h` + 8 hex of
 * sha256(id). Names are never parsed back: lookups are exact.
 */
export function projectToolName(commandId: string): string {
  const name = commandId.split('.').join('__')
  if (name.length <= 64) return name
  const suffix = `_h${createHash('sha256').update(commandId).digest('hex').slice(0, 8)}`
  const segments = commandId.split('.')
  let cut = ''
  for (const segment of segments) {
    const next = cut ? `${cut}__${segment}` : segment
    if (next.length + suffix.length > 64) break
    cut = next
  }
  // A first segment too long for any boundary is cut mid-segment.
  if (!cut) cut = (segments[0] ?? '').slice(0, 64 - suffix.length)
  return cut + suffix
}
