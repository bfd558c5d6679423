/** Helpers for the server scripts the bench runs as child processes. */

/**
 * Prints the line `startChildServer` waits for, then closes the server when told to: SIGTERM/SIGINT
 * from the bench, or EOF on stdin when the bench died without saying so.
 */
export function announceReady(url: string, info: Record<string, unknown>, close: () => Promise<void>): void {
  let closing = false
  const shutdown = (): void => {
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
  process.stdin.once('end', shutdown)
  process.stdin.resume()
  process.stdout.write(`ready ${url} ${JSON.stringify(info)}\n`)
}

/** Exits non-zero with the error on stderr, where the bench shows it. */
export function fail(error: unknown): never {
  console.error(error)
  process.exit(1)
}
