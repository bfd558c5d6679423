/**
 * Cleanups still owed (child processes, temp dirs, databases). Normally each resource is released by
 * its owner; this registry lets Ctrl-C or a crash in the middle of a run release the rest too.
 */
const pending = new Set<() => Promise<void>>()

/** Registers `release` and returns a run-once version of it that also unregisters it. */
export function registerCleanup(release: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined
  const once = (): Promise<void> => {
    pending.delete(once)
    running ??= release()
    return running
  }
  pending.add(once)
  return once
}

/** Runs every cleanup still owed, newest first (a database outlives the server using it). */
export async function cleanupAll(): Promise<void> {
  for (const release of [...pending].reverse()) {
    await release().catch((error: unknown) => console.error('bench cleanup failed:', error))
  }
}

/** On SIGINT/SIGTERM, release everything before exiting instead of leaving children and databases behind. */
export function cleanupOnSignals(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.error(`\n${signal}: cleaning up`)
      void cleanupAll().finally(() => process.exit(130))
    })
  }
}
