import {
  adjustWorkUsage,
  lockWorkUsage,
  projectWorkBytes,
  recordWorkUsage,
  workUsageOf,
  type Executor,
  type Store,
  type WorkUsage,
} from '../store/index.js'
import { maxWorkDepth, type WorkDirectories } from './workdirs.js'

/** Disk quotas of work directories (config `exec.quota`). */
export interface QuotaSettings {
  /** Bytes of files one conversation's work directory may hold. */
  conversationBytes: number
  /** Bytes all of one user's work directories may hold together. */
  userBytes: number
  /** Entries (files, directories, links) one work directory may hold. */
  conversationFiles: number
  /** Bytes the work directories of all of one project's conversations may hold together. */
  projectBytes: number
}

export const defaultQuota: QuotaSettings = {
  conversationBytes: 512 * 1024 * 1024,
  userBytes: 2 * 1024 * 1024 * 1024,
  conversationFiles: 50_000,
  projectBytes: 10 * 1024 * 1024 * 1024,
}

/** Room counted for one write before it happens (`WorkQuota.reserve`). */
export interface Reservation {
  conversationId: string
  ownerId: string
  bytes: number
  files: number
}

/** A write or an execution would put a work directory, or its owner, over quota. */
export class QuotaError extends Error {
  readonly code = 'quota_exceeded'
  constructor(message: string) {
    super(message)
    this.name = 'QuotaError'
  }
}

/** Exact bytes, and MiB beside them from 1 MiB on: a limit and a total that round alike still differ. */
function formatBytes(bytes: number): string {
  const exact = `${bytes.toLocaleString('en-US')} bytes`
  return bytes < 1024 * 1024 ? exact : `${exact} (${(bytes / (1024 * 1024)).toFixed(1)} MiB)`
}
const mib = formatBytes

/**
 * Keeps work directories within their quotas (docs/security.md, "disk quotas"). The server's own writes
 * are checked before they happen; an execution can write anything while it runs, so the directory is
 * measured after each one and, when over, what that execution wrote is removed (largest first) until
 * it is within again, and the execution fails with the reason.
 */
export class WorkQuota {
  readonly settings: QuotaSettings
  readonly #store: Store
  readonly #workdirs: WorkDirectories
  /** Reservations of writes in flight on this instance, per conversation: a measurement keeps them. */
  readonly #inFlight = new Map<string, WorkUsage>()

  constructor(store: Store, workdirs: WorkDirectories, settings: QuotaSettings) {
    this.#store = store
    this.#workdirs = workdirs
    this.settings = settings
  }

  /** Refuses (QuotaError) when `adding` more bytes, and `files` more entries, would not fit. */
  async ensureRoom(conversationId: string, ownerId: string, adding = 0, files = 0): Promise<void> {
    await this.#check(this.#store, conversationId, ownerId, adding, files)
  }

  /**
   * A server write's room, checked and counted at once (docs/security.md, "disk quotas"): refuses
   * (QuotaError) when `adding` more bytes (less what a replaced file frees: may be negative) and `files`
   * entries would not fit, and otherwise counts the bytes it adds before the write, so concurrent writes
   * (on any instance) cannot each take the same room. What a replacement frees is counted only once it
   * is written (`settle`): until then the old file still holds it. With `upTo`, as many of the `adding`
   * bytes as there is room for are counted (the room of a body of unknown length). End each reservation
   * with `settle` (written) or `release` (not).
   */
  async reserve(
    conversationId: string,
    ownerId: string,
    adding: number,
    files: number,
    options: { upTo?: boolean } = {},
  ): Promise<Reservation> {
    const reservation = await this.#store.transaction(async (tx) => {
      await lockWorkUsage(tx, conversationId, ownerId)
      const wanted = options.upTo ? Math.min(adding, await this.#room(tx, conversationId, ownerId)) : adding
      await this.#check(tx, conversationId, ownerId, wanted, files)
      const counted = { conversationId, ownerId, bytes: Math.max(0, wanted), files: Math.max(0, files) }
      await adjustWorkUsage(tx, conversationId, ownerId, counted)
      return counted
    })
    const held = this.#inFlight.get(conversationId) ?? { bytes: 0, files: 0 }
    this.#inFlight.set(conversationId, { bytes: held.bytes + reservation.bytes, files: held.files + reservation.files })
    return reservation
  }

  /** Ends a reservation with what was written: the usage becomes exact (the replaced file's room freed now). */
  async settle(reservation: Reservation, written: { size: number; replaced: number | null }): Promise<void> {
    this.#forget(reservation)
    await this.adjust(reservation.conversationId, reservation.ownerId, {
      bytes: written.size - (written.replaced ?? 0) - reservation.bytes,
      files: (written.replaced === null ? 1 : 0) - reservation.files,
    })
  }

  /** Gives a reservation back (the write failed). */
  async release(reservation: Reservation): Promise<void> {
    this.#forget(reservation)
    await this.adjust(reservation.conversationId, reservation.ownerId, {
      bytes: -reservation.bytes,
      files: -reservation.files,
    })
  }

  #forget(reservation: Reservation): void {
    const held = this.#inFlight.get(reservation.conversationId)
    if (!held) return
    const left = { bytes: held.bytes - reservation.bytes, files: held.files - reservation.files }
    if (left.bytes <= 0 && left.files <= 0) this.#inFlight.delete(reservation.conversationId)
    else this.#inFlight.set(reservation.conversationId, left)
  }

  /** The bytes one more write may add before any quota is reached. */
  async #room(db: Executor, conversationId: string, ownerId: string): Promise<number> {
    const usage = await workUsageOf(db, conversationId, ownerId)
    const project = await projectWorkBytes(db, conversationId)
    const { conversationBytes, userBytes, projectBytes } = this.settings
    return Math.max(
      0,
      Math.min(conversationBytes - usage.conversation.bytes, userBytes - usage.user.bytes, projectBytes - project),
    )
  }

  async #check(db: Executor, conversationId: string, ownerId: string, adding: number, files: number): Promise<void> {
    const usage = await workUsageOf(db, conversationId, ownerId)
    const { conversationBytes, userBytes, conversationFiles, projectBytes } = this.settings
    if (usage.conversation.bytes + adding > conversationBytes) {
      throw new QuotaError(
        `the work directory would hold ${mib(usage.conversation.bytes + adding)}; it is limited to ${mib(conversationBytes)} (delete files with DELETE …/files/*path)`,
      )
    }
    if (usage.user.bytes + adding > userBytes) {
      throw new QuotaError(
        `your work directories would hold ${mib(usage.user.bytes + adding)}; they are limited to ${mib(userBytes)} together`,
      )
    }
    const project = await projectWorkBytes(db, conversationId)
    if (project + adding > projectBytes) {
      throw new QuotaError(
        `the project's work directories would hold ${mib(project + adding)}; they are limited to ${mib(projectBytes)} together`,
      )
    }
    if (usage.conversation.files + files > conversationFiles)
      throw new QuotaError(`the work directory would hold more than ${conversationFiles} entries`)
  }

  /** Records what the server itself changed (a write, a delete). */
  async adjust(conversationId: string, ownerId: string, change: WorkUsage): Promise<void> {
    await adjustWorkUsage(this.#store, conversationId, ownerId, change)
  }

  /**
   * After an execution that started at `startedAt` (ms since the epoch): measures the directory and, over
   * quota, removes the files the execution wrote, largest first, until it fits; then throws.
   */
  async settleAfterExec(conversationId: string, ownerId: string, startedAt: number): Promise<void> {
    const { conversationBytes, userBytes, conversationFiles, projectBytes } = this.settings
    // A second of slack: a file system keeps modification times coarser than the clock. The server's
    // own writes in it (an upload just before) are told apart by `measure`.
    // Counted well past the limit, so that what the execution wrote can be found and removed.
    const measureOptions = { since: startedAt - 1000, maxFiles: conversationFiles * 10 }
    let measured = await this.#workdirs.measure(conversationId, measureOptions)
    // Nested deeper than paths may name: never counted, so never kept, whoever wrote it.
    const tooDeep = measured.tooDeep.map((parts) => parts.join('/'))
    if (tooDeep.length > 0) {
      for (const parts of measured.tooDeep) await this.#workdirs.emptyTooDeep(conversationId, parts)
      measured = await this.#workdirs.measure(conversationId, measureOptions)
    }
    const recorded = await workUsageOf(this.#store, conversationId, ownerId)
    const others = recorded.user.bytes - recorded.conversation.bytes
    const projectOthers = (await projectWorkBytes(this.#store, conversationId)) - recorded.conversation.bytes
    const limit = Math.min(
      conversationBytes,
      userBytes - Math.max(0, others),
      projectBytes - Math.max(0, projectOthers),
    )
    let { bytes, files } = measured
    const over = bytes > limit || files > conversationFiles || measured.truncated
    const removed: string[] = []
    if (over) {
      // Largest first until it fits, chosen up front and removed a directory at a time: a program that
      // made 100,000 files is cleaned up in seconds, well inside the bus's time for the call.
      const chosen: string[][] = []
      for (const entry of measured.recent.sort((a, b) => b.size - a.size)) {
        if (bytes <= limit && files <= conversationFiles) break
        chosen.push(entry.parts)
        bytes -= entry.size
        files--
      }
      const gone = await this.#workdirs.removeFiles(conversationId, chosen)
      // What could not be removed (swapped for something else meanwhile) is still there.
      bytes += gone.missedBytes
      files += gone.missed
      removed.push(...gone.removed)
      if (measured.truncated) {
        // The count stopped early: measure again what is left.
        const again = await this.#workdirs.measure(conversationId, { maxFiles: conversationFiles * 2 })
        bytes = again.bytes
        files = again.files
      }
    }
    // A write still in flight here was counted before its bytes landed: the measurement must not drop it.
    const held = this.#inFlight.get(conversationId) ?? { bytes: 0, files: 0 }
    await recordWorkUsage(this.#store, conversationId, ownerId, {
      bytes: bytes + held.bytes,
      files: files + held.files,
    })
    if (tooDeep.length > 0 && !over)
      throw new QuotaError(
        `the program nested directories deeper than ${maxWorkDepth} levels; what they held was removed: ${tooDeep
          .slice(0, 3)
          .map((path) => `${path.slice(0, 60)}…/`)
          .join(', ')}`,
      )
    if (over) {
      const shown = removed.slice(0, 10).join(', ') + (removed.length > 10 ? `, and ${removed.length - 10} more` : '')
      throw new QuotaError(
        (tooDeep.length > 0
          ? `the program nested directories deeper than ${maxWorkDepth} levels (what they held was removed), and `
          : '') +
          `the program went over the work directory's quota (${mib(conversationBytes)} and ${conversationFiles} entries per conversation, ${mib(userBytes)} per user, ${mib(projectBytes)} per project); ` +
          (removed.length > 0 ? `the files it wrote were removed: ${shown}` : 'nothing it wrote could be removed'),
      )
    }
  }
}
