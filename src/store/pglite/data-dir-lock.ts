import { readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { StoreError } from '../store-errors.js'

/**
 * PGlite is single-process: two processes on one data directory corrupt it. The first process to
 * open the directory writes its pid into `plinth.lock`; others refuse while that process lives.
 * Returns the release function.
 */
export async function lockDataDir(dataDir: string): Promise<() => Promise<void>> {
  const path = join(dataDir, 'plinth.lock')
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await writeFile(path, String(process.pid), { flag: 'wx' })
      return async () => {
        await rm(path, { force: true })
      }
    } catch (error) {
      if ((error as { code?: string }).code !== 'EEXIST') throw error
      const holder = Number((await readFile(path, 'utf8').catch(() => '')).trim())
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isAlive(holder)) {
        throw new StoreError(
          'data_dir_locked',
          `the embedded database in ${dataDir} is in use by another Plinth process (pid ${holder}); stop it first, or use the HTTP admin API (PLINTH_ADMIN_TOKEN) while it runs`,
        )
      }
      // A stale lock from a process that is gone: take it over.
      await rm(path, { force: true })
    }
  }
  throw new StoreError('data_dir_locked', `could not lock ${dataDir}`)
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { code?: string }).code === 'EPERM'
  }
}
