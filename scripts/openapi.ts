/**
 * The OpenAPI document of a running Plinth and the TypeScript types generated from it with
 * openapi-typescript. `npm run openapi` writes both to openapi/ (the package exports the types as
 * `plinth/openapi`); a test fails when they are stale.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript'
import { pino } from 'pino'
import { loadConfig, startServer } from '../src/app/index.js'

export const openapiDir = fileURLToPath(new URL('../openapi/', import.meta.url))
export const typesFile = join(openapiDir, 'plinth-api.d.ts')

/** Starts a throwaway server (embedded database in a temp dir, admin API on) and reads /docs/json. */
export async function fetchOpenApiDocument(): Promise<Record<string, unknown>> {
  const dataDir = await mkdtemp(join(tmpdir(), 'plinth-openapi-'))
  try {
    const config = loadConfig(
      { PLINTH_DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', PLINTH_ADMIN_TOKEN: 'openapi-admin-token-0123456789' },
      dataDir,
    )
    const server = await startServer(config, pino({ level: 'silent' }))
    try {
      return (await (await fetch(`${server.url}/docs/json`)).json()) as Record<string, unknown>
    } finally {
      await server.close()
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true })
  }
}

/** The document as it is committed: stable key order, the version left out (it changes with every release). */
export function documentText(document: Record<string, unknown>): string {
  const info = { ...(document.info as Record<string, unknown>), version: '0.0.0' }
  return `${JSON.stringify({ ...document, info }, null, 2)}\n`
}

/** TypeScript types of the document (`paths`, `components`, `operations`). */
export async function typesOf(document: Record<string, unknown>): Promise<string> {
  const ast = await openapiTS(JSON.parse(documentText(document)) as never, { alphabetize: true })
  return `${COMMENT_HEADER}${astToString(ast)}`
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { writeFile } = await import('node:fs/promises')
  const document = await fetchOpenApiDocument()
  await writeFile(typesFile, await typesOf(document))
  console.log(`wrote ${typesFile}`)
}
