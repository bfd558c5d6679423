import { readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { StoreError } from '../store-errors.js'

/** Waiting for a data directory another process holds (a server still shutting down). */
export interface LockWait {
  /** How long to wait for the holder to let go (0: refuse at once). */
  ms: number
  /** Told once when the wait starts (the holder's pid). */
  onWait?: (holder: number) => void
}

/**
 * PGlite is single-process: two processes on one data directory corrupt it. The first process to
 * open the directory writes its pid into `plinth.lock`; others wait up to `wait.ms` for that process
 * to let go (a restart right after a stop), then refuse while it lives. Returns the release function.
 */
export async function lockDataDir(dataDir: string, wait: LockWait = { ms: 0 }): Promise<() => Promise<void>> {
  const path = join(dataDir, 'plinth.lock')
  const deadline = Date.now() + wait.ms
  let told = false
  for (;;) {
    try {
      await writeFile(path, String(process.pid), { flag: 'wx' })
      return async () => {
        await rm(path, { force: true })
      }
    } catch (error) {
      if ((error as { code?: string }).code !== 'EEXIST') throw error
      const holder = Number((await readFile(path, 'utf8').catch(() => '')).trim())
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isAlive(holder)) {
        if (Date.now() < deadline) {
          if (!told) wait.onWait?.(holder)
          told = true
          await new Promise((resolve) => setTimeout(resolve, 200))
          continue
        }
        throw new StoreError(
          'data_dir_locked',
          `the embedded database in ${dataDir} is in use by another Plinth process (pid ${holder})${wait.ms > 0 ? ` (waited ${Math.round(wait.ms / 1000)} s)` : ''}; stop it first, or use the HTTP admin API (PLINTH_ADMIN_TOKEN) while it runs`,
        )
      }
      // A stale lock from a process that is gone: take it over.
      await rm(path, { force: true })
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { code?: string }).code === 'EPERM'
  }
}
