import type { Actor, Host, JsonValue, KnowledgeHit, PluginEvent, PluginLogger } from '../extension/index.js'
import { copy, MemoryKv } from './memory-kv.js'
import { memoryLogger, type LogLine } from './memory-logger.js'

/** A Host stub: kv and log in memory, `audit`, `emit`, `accessChanged` and `addKnowledge` recorded, `knowledgeSearch` answering `hits`. */
export interface TestHost extends Host {
  kv: MemoryKv
  log: PluginLogger & { lines: LogLine[] }
  audited: Array<{ action: string; data: { [key: string]: JsonValue } }>
  emitted: PluginEvent[]
  /** Project ids passed to `accessChanged` (`null`: every project). */
  accessChanges: Array<string | null>
  /** Items added with `addKnowledge`, with the id each was given. */
  knowledge: Array<{ itemId: string; actor: Actor; projectId: string; title: string; text: string }>
  hits: KnowledgeHit[]
}

export function createHost(kv: MemoryKv = new MemoryKv()): TestHost {
  const host: TestHost = {
    kv,
    log: memoryLogger(),
    audited: [],
    emitted: [],
    accessChanges: [],
    knowledge: [],
    hits: [],
    options: { execBackend: 'direct', disableExecTools: false },
    async audit(action, data) {
      host.audited.push({ action, data: copy(data) })
    },
    async emit(event) {
      host.emitted.push(event)
    },
    async accessChanged(projectId) {
      host.accessChanges.push(projectId ?? null)
    },
    async addKnowledge(actor, item) {
      const itemId = `kn_${host.knowledge.length + 1}`
      host.knowledge.push({ itemId, actor, ...item })
      return { itemId }
    },
    async knowledgeSearch(_actor, _query, options) {
      return host.hits
        .filter((hit) => !options?.projectId || hit.projectId === options.projectId)
        .slice(0, options?.k ?? 10)
    },
  }
  return host
}
