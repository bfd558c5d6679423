import { createTempDatabase } from '../lib/resources.js'
import type { Scenario, StartedScenario } from '../lib/scenario.js'
import { startPlinth } from './plinth-projects.js'

type Target = 'me' | 'dispatch'

/**
 * Command-dispatch overhead: `POST /api/commands/rdm.ping` from a button (validate, authorize, gate,
 * run; its row with the requested and running entries in one statement, the finished entry in another)
 * next to `GET /api/me`, a plain authenticated route, on the same server.
 */
export function request(
  server: { url: string; token: string },
  target: Target,
): Pick<StartedScenario, 'request' | 'check'> {
  const headers = { authorization: `Bearer ${server.token}`, 'content-type': 'application/json' }
  if (target === 'me') {
    return {
      request: { url: `${server.url}/api/me`, headers },
      check: ({ status }) => (status === 200 ? undefined : `GET /api/me answered ${status}`),
    }
  }
  return {
    request: {
      url: `${server.url}/api/commands/rdm.ping`,
      method: 'POST',
      headers,
      body: JSON.stringify({ entrance: 'button', params: { target: 'bench' } }),
    },
    check: ({ status, body }) =>
      status === 200 && body.includes('"succeeded"') ? undefined : `dispatch answered ${status}: ${body.slice(0, 200)}`,
  }
}

function scenario(
  name: string,
  target: Target,
  adminUrl: string | undefined,
  engine: 'pglite' | 'pg',
  env: Record<string, string> = {},
): Scenario {
  return {
    name,
    async start() {
      if (engine === 'pglite') {
        const server = await startPlinth()
        return { ...request(server, target), stop: () => server.stop() }
      }
      if (!adminUrl) return { skip: 'set TEST_DATABASE_URL' }
      const database = await createTempDatabase(adminUrl)
      try {
        const server = await startPlinth(database.url, env)
        return {
          ...request(server, target),
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

export function dispatchScenarios(adminUrl: string | undefined): Scenario[] {
  return [
    scenario('plinth GET /api/me (PGlite)', 'me', adminUrl, 'pglite'),
    scenario('plinth POST /api/commands/rdm.ping (PGlite)', 'dispatch', adminUrl, 'pglite'),
    scenario('plinth GET /api/me (pg)', 'me', adminUrl, 'pg'),
    scenario('plinth POST /api/commands/rdm.ping (pg)', 'dispatch', adminUrl, 'pg'),
    // The operator's choice that trades the last acknowledged writes on a Postgres crash for throughput.
    scenario('plinth POST /api/commands/rdm.ping (pg, synchronous_commit off)', 'dispatch', adminUrl, 'pg', {
      PLINTH_PG_SYNCHRONOUS_COMMIT: 'false',
    }),
  ]
}
