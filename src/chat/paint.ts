const codes = { bold: [1, 22], dim: [2, 22], red: [31, 39], yellow: [33, 39], cyan: [36, 39] } as const

/** ANSI colour for a terminal (nothing when `enabled` is false: pipes, NO_COLOR). */
export function paint(enabled: boolean, style: keyof typeof codes, text: string): string {
  if (!enabled) return text
  const [open, close] = codes[style]
  return `\u001b[${open}m${text}\u001b[${close}m`
}
