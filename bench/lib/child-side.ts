/** Helpers for the server scripts the bench runs as child processes (import this first). */

let shutdown: (() => void) | null = null

// stdin is a pipe from the bench: EOF means the bench is gone (even if it was SIGKILLed), so stop too,
// gracefully once serving, at once while still starting up.
process.stdin.once('end', () => (shutdown ? shutdown() : process.exit(1)))
process.stdin.resume()

/**
 * Prints the line `startChildServer` waits for, then closes the server when told to: SIGTERM/SIGINT
 * from the bench, or EOF on stdin.
 */
export function announceReady(url: string, info: Record<string, unknown>, close: () => Promise<void>): void {
  let closing = false
  shutdown = () => {
    if (closing) return
    closing = true
    close().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error('close failed:', error)
        process.exit(1)
      },
    )
  }
  process.once('SIGTERM', shutdown)
  process.once('SIGINT', shutdown)
  process.stdout.write(`ready ${url} ${JSON.stringify(info)}\n`)
}

/** Exits non-zero with the error on stderr, where the bench shows it. */
export function fail(error: unknown): never {
  console.error(error)
  process.exit(1)
}
