import type { JsonValue } from '../extension/index.js'
import {
  auditCheckpointSigned,
  genesisHash,
  hashAuditEntry,
  listAuditDispatches,
  projectIdsOwnedBy,
  readAuditEntries,
  readAuditCheckpoint,
  readAuditTail,
  type AuditFilter,
  type Page,
  type PageRequest,
  type Store,
} from '../store/index.js'

/** A dispatch as `GET /api/audit` shows it: the latest envelope plus its steps. */
export type AuditEnvelopeView = { [key: string]: JsonValue } & {
  history: Array<{ entryId: number; step: string; status: JsonValue; at: string }>
}

/** Dispatches visible to `filter.userId` (on their behalf, or in a project they own), newest first. */
export async function listAuditEnvelopes(
  store: Store,
  filter: Omit<AuditFilter, 'visibleProjectIds'>,
  page: PageRequest,
): Promise<Page<AuditEnvelopeView>> {
  const dispatches = await listAuditDispatches(
    store,
    { ...filter, visibleProjectIds: await ownedProjectIds(store, filter.userId) },
    page,
  )
  return {
    items: dispatches.items
      .filter((item) => item.entries.length > 0)
      .map((item) => {
        const latest = item.entries.at(-1)!
        return {
          ...latest.envelope,
          history: item.entries.map((entry) => ({
            entryId: entry.id,
            step: entry.step,
            status: entry.envelope.status ?? null,
            at: entry.createdAt,
          })),
        }
      }),
    nextCursor: dispatches.nextCursor,
  }
}

export interface ChainVerdict {
  ok: boolean
  checked: number
  /** The first entry that does not fit the chain. */
  firstBad?: { id: number; reason: string }
  /** Where the walk started when retention removed the oldest entries: the signed checkpoint it trusts. */
  checkpoint?: { throughId: number; throughHash: string; createdAt: string }
}

/**
 * Walks the audit chain in id order: each entry must link to the previous entry's hash and carry the
 * hash of its own content. An altered entry fails its hash; a removed or reordered one breaks the link
 * of the next; entries removed from the end no longer reach the tail the chain's last append recorded.
 * After retention removed the oldest entries, the walk starts at the newest checkpoint, whose signature
 * (a key derived from `secretKey`) must hold: the first entry kept links to the last one removed.
 */
export async function verifyAuditChain(store: Store, options: { secretKey?: string } = {}): Promise<ChainVerdict> {
  // A retention sweep that cuts the chain during the walk moves its start: walk again from the new checkpoint.
  for (let attempt = 1; ; attempt++) {
    const before = (await readAuditCheckpoint(store))?.throughId
    const verdict = await walkAuditChain(store, options.secretKey)
    if (verdict.ok || attempt === 3 || (await readAuditCheckpoint(store))?.throughId === before) return verdict
  }
}

async function walkAuditChain(store: Store, secretKey: string | undefined): Promise<ChainVerdict> {
  // Read first: entries appended while the walk runs come after it.
  const tail = await readAuditTail(store)
  const checkpoint = await readAuditCheckpoint(store)
  let previousHash = genesisHash
  let afterId = 0
  let checked = 0
  let reachedTail = tail.id === 0
  let from: ChainVerdict['checkpoint']
  if (checkpoint) {
    from = { throughId: checkpoint.throughId, throughHash: checkpoint.throughHash, createdAt: checkpoint.createdAt }
    const bad = (reason: string): ChainVerdict => ({
      ok: false,
      checked,
      firstBad: { id: checkpoint.throughId, reason },
      checkpoint: from,
    })
    if (!secretKey)
      return bad('retention removed entries up to here; checking its checkpoint needs the server’s secretKey')
    if (!auditCheckpointSigned(checkpoint, secretKey))
      return bad('the retention checkpoint’s signature does not match (it was altered or forged)')
    previousHash = checkpoint.throughHash
    afterId = checkpoint.throughId
    reachedTail = tail.id === checkpoint.throughId && tail.hash === checkpoint.throughHash
  }
  for (;;) {
    const entries = await readAuditEntries(store, afterId, 1000)
    for (const entry of entries) {
      if (entry.prevHash !== previousHash) {
        return {
          ok: false,
          checked,
          firstBad: {
            id: entry.id,
            reason: 'does not link to the entry before it (an entry was removed, inserted or reordered)',
          },
          ...(from && { checkpoint: from }),
        }
      }
      const { hash, ...content } = entry
      if (hashAuditEntry(content) !== hash)
        return {
          ok: false,
          checked,
          firstBad: { id: entry.id, reason: 'its content does not match its hash (the entry was altered)' },
          ...(from && { checkpoint: from }),
        }
      if (entry.id === tail.id && hash === tail.hash) reachedTail = true
      previousHash = hash
      afterId = entry.id
      checked++
    }
    if (entries.length < 1000) {
      if (!reachedTail)
        return {
          ok: false,
          checked,
          firstBad: {
            id: tail.id,
            reason: 'the newest entries are missing (the log ends before the last entry appended)',
          },
          ...(from && { checkpoint: from }),
        }
      return { ok: true, checked, ...(from && { checkpoint: from }) }
    }
  }
}

/** Every project the user owns, deleted ones included: their history stays the owner's to read. */
export async function ownedProjectIds(store: Store, userId: string): Promise<string[]> {
  return projectIdsOwnedBy(store, userId)
}
