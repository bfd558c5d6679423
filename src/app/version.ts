import { readFileSync } from 'node:fs'

/** The package version, read once from package.json (two levels up from src/app and dist/src/app alike). */
export const version: string = (() => {
  for (const relative of ['../../package.json', '../../../package.json']) {
    try {
      const parsed = JSON.parse(readFileSync(new URL(relative, import.meta.url), 'utf8')) as {
        name?: string
        version?: string
      }
      if (parsed.name === 'plinth' && parsed.version) return parsed.version
    } catch {
      // try the next candidate
    }
  }
  return '0.0.0'
})()
