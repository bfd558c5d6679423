import { sql } from 'kysely'
import { kysely, type Executor } from './executor.js'

/** The channel on which changes of access are announced to every server instance. */
export const accessChannel = 'plinth_access'

/**
 * What lost (or may have lost) access: one token, every token of a user, everything in a project,
 * or `all` (a ProjectAuthz adapter changed its answers without saying for which project).
 */
export type AccessSubject = `token:${string}` | `user:${string}` | `project:${string}` | 'all'

export type AccessListener = (subject: AccessSubject) => void

/**
 * Announces access changes. Inside a transaction the notifications are delivered on commit (and
 * dropped on rollback), so no listener re-checks before the change is visible.
 */
export async function announceAccessChange(db: Executor, subjects: readonly AccessSubject[]): Promise<void> {
  if (subjects.length === 0) return
  await sql`select pg_notify(${accessChannel}, subject) from unnest(${[...subjects]}::text[]) as subject`.execute(
    kysely(db),
  )
}

/** In-process fan-out of access notifications (from this and every other instance). */
export class AccessSignals {
  readonly #listeners = new Set<AccessListener>()
  readonly #echoes = new Set<{ subject: AccessSubject; heard: () => void }>()

  subscribe(listener: AccessListener): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  /** A change made here, told to this instance's listeners at once. */
  deliver(payload?: string): void {
    const subject = parseSubject(payload)
    for (const listener of this.#listeners) listener(subject)
  }

  /**
   * A notification from the database's listening connection; none (a reconnected listener may have
   * missed some) means `all`. Ends the waits of `echo` for its subject.
   */
  heard(payload?: string): void {
    const subject = parseSubject(payload)
    this.deliver(subject)
    for (const echo of this.#echoes) if (subject === 'all' || echo.subject === subject) echo.heard()
  }

  /**
   * Call before announcing `subject`; the returned function resolves once this instance has heard the
   * announcement back from the database (or after `timeoutMs`). By then the database has signalled every
   * listening instance, so a revocation answered after it is not ahead of the other instances' caches.
   */
  echo(subject: AccessSubject, timeoutMs = 2000): () => Promise<void> {
    let timer: NodeJS.Timeout | undefined
    const heard = new Promise<void>((resolve) => {
      const entry = {
        subject,
        heard: () => {
          this.#echoes.delete(entry)
          clearTimeout(timer)
          resolve()
        },
      }
      this.#echoes.add(entry)
      timer = setTimeout(entry.heard, timeoutMs)
      timer.unref()
    })
    return () => heard
  }
}

function parseSubject(payload: string | undefined): AccessSubject {
  if (payload && /^(token|user|project):[^\s]{1,64}$/.test(payload)) return payload as AccessSubject
  return 'all'
}
