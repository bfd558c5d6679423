import { startChildServer, type ChildServer } from '../lib/child-server.js'
import { createTempDatabase, createTempDir } from '../lib/resources.js'
import type { Scenario, StartedScenario } from '../lib/scenario.js'
import { unlimitedEnv } from '../lib/unlimited-env.js'

const projectCount = 20

/** Starts Plinth in a child on a throwaway data dir (and database, for pg), seeded with a user and projects. */
export async function startPlinth(
  databaseUrl?: string,
  env: Record<string, string> = {},
  root?: string,
): Promise<ChildServer & { token: string }> {
  const dataDir = await createTempDir('plinth-bench-')
  try {
    const server = await startChildServer('bench/servers/plinth-server.ts', {
      env: {
        HOST: '127.0.0.1',
        PORT: '0',
        PLINTH_DATA_DIR: dataDir.path,
        PLINTH_LOG_LEVEL: 'silent',
        ...unlimitedEnv,
        // rdm.ping is the no-op low-risk command the dispatch scenario loads.
        PLINTH_PLUGINS: 'rdm',
        BENCH_PROJECTS: String(projectCount),
        ...(databaseUrl && { DATABASE_URL: databaseUrl }),
        ...env,
      },
      ...(root && { root }),
    })
    const token = server.info.token
    if (typeof token !== 'string') {
      await server.stop()
      throw new Error('plinth-server did not report a token')
    }
    return {
      ...server,
      token,
      stop: async () => {
        await server.stop()
        await dataDir.remove()
      },
    }
  } catch (error) {
    await dataDir.remove()
    throw error
  }
}

/** Authenticated `GET /api/projects` listing the caller's 20 projects. */
function projectsRequest(server: ChildServer & { token: string }): Pick<StartedScenario, 'request' | 'check'> {
  return {
    request: { url: `${server.url}/api/projects`, headers: { authorization: `Bearer ${server.token}` } },
    check: ({ body }) => {
      const items = (JSON.parse(body) as { items?: unknown[] }).items
      return items?.length === projectCount
        ? undefined
        : `expected ${projectCount} projects, got ${items?.length ?? 'no list'}`
    },
  }
}

export function plinthProjectsOnPGlite(): Scenario {
  return {
    name: 'plinth GET /api/projects (PGlite)',
    async start() {
      const server = await startPlinth()
      return { ...projectsRequest(server), stop: () => server.stop() }
    },
  }
}

/** On a fresh database of the Postgres at `adminUrl`; skipped without one. */
export function plinthProjectsOnPg(adminUrl: string | undefined): Scenario {
  return {
    name: 'plinth GET /api/projects (pg)',
    async start() {
      if (!adminUrl) return { skip: 'set TEST_DATABASE_URL' }
      const database = await createTempDatabase(adminUrl)
      try {
        const server = await startPlinth(database.url)
        return {
          ...projectsRequest(server),
          stop: async () => {
            await server.stop()
            await database.drop()
          },
        }
      } catch (error) {
        await database.drop()
        throw error
      }
    },
  }
}
