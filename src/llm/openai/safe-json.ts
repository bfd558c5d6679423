/** The result of a JSON parse that never throws (upstream data is never trusted to be JSON). */
export type JsonParseResult = { ok: true; value: unknown } | { ok: false }

/** Parses upstream text as JSON without throwing. */
export function safeParseJson(text: string): JsonParseResult {
  try {
    return { ok: true, value: JSON.parse(text) as unknown }
  } catch {
    return { ok: false }
  }
}

/** `value` as a plain object, or undefined (arrays and null are not records). */
export function asRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined
}
