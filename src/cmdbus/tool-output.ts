/**
 * What the model reads of a tool result: at most `limitBytes` of UTF-8, cut on a code-point boundary
 * (docs/guides/agent-runs.md, "Tool results").
 */
export function capForModel(text: string, limitBytes: number): { text: string; truncated: boolean } {
  const bytes = Buffer.byteLength(text)
  if (bytes <= limitBytes) return { text, truncated: false }
  const lines = text.split('\n').length
  let cut = ''
  let used = 0
  for (const char of text) {
    const size = Buffer.byteLength(char)
    if (used + size > limitBytes) break
    cut += char
    used += size
  }
  return { text: `${cut}\n... [TRUNCATED, total=${bytes} bytes, ${lines} lines]`, truncated: true }
}
