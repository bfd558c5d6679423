/** Percentiles (nearest rank) and millisecond formatting for the agent bench. */

export interface Summary {
  count: number
  p50: number
  p95: number
  p99: number
  max: number
}

export function summarize(values: readonly number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b)
  const at = (q: number): number => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN
  return { count: sorted.length, p50: at(0.5), p95: at(0.95), p99: at(0.99), max: sorted.at(-1) ?? Number.NaN }
}

/** `12.34` under 100 ms, `123` above; `n/a` for NaN. */
export function ms(value: number): string {
  if (!Number.isFinite(value)) return 'n/a'
  return Math.abs(value) < 100 ? value.toFixed(2) : value.toFixed(0)
}

/** A fixed-width table (first column left-aligned, the others right-aligned). */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]?.length ?? 0)))
  const line = (cells: string[]): string =>
    cells
      .map((cell, column) => (column === 0 ? cell.padEnd(widths[0] ?? 0) : cell.padStart(widths[column] ?? 0)))
      .join('  ')
      .trimEnd()
  return [line(header), line(widths.map((width) => '-'.repeat(width))), ...rows.map(line)].join('\n')
}
