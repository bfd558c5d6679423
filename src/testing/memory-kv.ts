import type { JsonValue, KvStore } from '../extension/index.js'

/** A JSON round trip: what a real store hands back is never the object that was stored. */
export function copy<T extends JsonValue>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T
}

/** An in-memory KvStore with the real one's semantics: JSON values, copies in and out, `list` in key order. */
export class MemoryKv implements KvStore {
  readonly entries = new Map<string, JsonValue>()

  async get<T extends JsonValue = JsonValue>(key: string): Promise<T | undefined> {
    const value = this.entries.get(key)
    return value === undefined ? undefined : (copy(value) as T)
  }

  async set(key: string, value: JsonValue): Promise<void> {
    this.entries.set(key, copy(value))
  }

  async delete(key: string): Promise<void> {
    this.entries.delete(key)
  }

  async update<T extends JsonValue = JsonValue>(
    key: string,
    change: (current: T | undefined) => JsonValue | undefined,
  ): Promise<JsonValue | undefined> {
    const next = change(await this.get<T>(key))
    if (next === undefined) this.entries.delete(key)
    else this.entries.set(key, copy(next))
    return next === undefined ? undefined : copy(next)
  }

  async list(prefix = ''): Promise<Array<{ key: string; value: JsonValue }>> {
    return [...this.entries.keys()]
      .filter((key) => key.startsWith(prefix))
      .sort()
      .map((key) => ({ key, value: copy(this.entries.get(key) as JsonValue) }))
  }
}
