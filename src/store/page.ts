/** One page of a list, newest or oldest first depending on the list. `nextCursor` is the last id. */
export interface Page<T> {
  items: T[]
  nextCursor: string | null
}

export interface PageRequest {
  limit: number
  /** Continue after this id (exclusive). */
  after?: string
}

/** Cuts a `limit + 1` read into a page. */
export function toPage<T extends { id: string }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit)
  return { items, nextCursor: rows.length > limit ? (items.at(-1)?.id ?? null) : null }
}
