/**
 * Plinth as deployed (composition root, real config loading), on whatever DATABASE_URL /
 * PLINTH_DATA_DIR the bench passes, seeded with one user, a token and some projects.
 */
import { createLogger, loadConfig, startServer } from '../../src/app/index.js'
import { createProject, createToken, createUser } from '../../src/store/index.js'
import { announceReady, fail } from '../lib/child-side.js'

const projectCount = Number(process.env.BENCH_PROJECTS ?? 20)

try {
  const dataDir = process.env.PLINTH_DATA_DIR
  if (!dataDir) throw new Error('PLINTH_DATA_DIR must be set')
  // Resolve the config against the (empty) temp dir, so a plinth.config.json in the repo does not leak in.
  const config = loadConfig(process.env, dataDir)
  const server = await startServer(config, createLogger(config.logLevel))
  try {
    const user = await createUser(server.store, 'bench')
    if ('error' in user) throw new Error(`cannot create bench user: ${user.error}`)
    const { token } = await createToken(server.store, user.id, 'bench')
    for (let index = 1; index <= projectCount; index++) {
      await server.store.transaction((tx) =>
        createProject(tx, user.id, { name: `project ${index}`, description: 'bench project' }),
      )
    }
    announceReady(server.url, { token, engine: server.store.engine, projects: projectCount }, () => server.close())
  } catch (error) {
    await server.close()
    throw error
  }
} catch (error) {
  fail(error)
}
