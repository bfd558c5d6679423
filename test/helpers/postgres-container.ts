import { existsSync } from 'node:fs'

/**
 * Starts a pgvector Postgres with testcontainers when a Docker engine is reachable; undefined
 * otherwise (no socket, or the engine does not answer, as on machines with only the client).
 */
export async function startPostgresContainer(): Promise<{ url: string; stop: () => Promise<void> } | undefined> {
  if (!process.env.DOCKER_HOST && !existsSync('/var/run/docker.sock')) return undefined
  try {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql')
    const container = await new PostgreSqlContainer('pgvector/pgvector:pg17')
      .withUsername('plinth')
      .withPassword('plinth')
      .withDatabase('plinth')
      .start()
    return { url: container.getConnectionUri(), stop: async () => void (await container.stop()) }
  } catch (error) {
    console.warn(`[plinth tests] Docker socket present but no usable engine: ${(error as Error).message}`)
    return undefined
  }
}
