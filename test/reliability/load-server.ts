import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startFakeOpenAIUpstream } from '../../bench/agent/fake-openai-upstream.js'
import { unlimitedEnv } from '../../bench/lib/unlimited-env.js'
import { lastLine, runPlinth, startServe, type ServeProcess } from '../helpers/cli-process.js'
import { createTestDatabase, type TestDatabase, type TestEngine } from '../helpers/engines.js'

const weatherPlugin = fileURLToPath(new URL('../../bench/plugins/weather.ts', import.meta.url))

/** A `plinth serve` under load: an instant upstream in the real OpenAI wire format, limits lifted. */
export interface LoadServer {
  server: ServeProcess
  url: string
  token: string
  upstream: Awaited<ReturnType<typeof startFakeOpenAIUpstream>>
  /** Stops the server and starts it again on the same data with `env` added; `url` changes. */
  restart(env: Record<string, string>): Promise<void>
  close(): Promise<void>
}

/** Starts one (on a database of its own when `engine` is Postgres); `env` adds to the load settings. */
export async function startLoadServer(options: {
  engine: TestEngine
  name: string
  env?: Record<string, string>
}): Promise<LoadServer> {
  const cwd = await mkdtemp(join(tmpdir(), `plinth-${options.name}-${options.engine}-`))
  const upstream = await startFakeOpenAIUpstream()
  let database: TestDatabase | undefined
  let server: ServeProcess | undefined
  const close = async (): Promise<void> => {
    await server?.kill()
    await upstream.close()
    await database?.drop()
    await rm(cwd, { recursive: true, force: true })
  }
  try {
    const model = {
      id: 'fake',
      provider: 'openai',
      model: 'm',
      baseUrl: upstream.url,
      contextWindow: 128_000,
      supportsTools: true,
    }
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({ plugins: ['rdm', weatherPlugin], models: [model], defaultModel: 'fake' }),
    )
    const env: Record<string, string> = {
      ...unlimitedEnv,
      PLINTH_LOG_LEVEL: 'info',
      PLINTH_LLM_CONCURRENCY: '64',
      ...options.env,
    }
    if (options.engine === 'postgres') {
      database = await createTestDatabase('postgres')
      env.DATABASE_URL = database.url!
    }
    const token = lastLine((await runPlinth(['users', 'create', options.name], { cwd, env })).stdout)
    server = await startServe({ cwd, env })
    const load: LoadServer = {
      server,
      url: server.url,
      token,
      upstream,
      close,
      async restart(more) {
        await server!.stop()
        server = await startServe({ cwd, env: { ...env, ...more } })
        load.server = server
        load.url = server.url
      },
    }
    return load
  } catch (error) {
    await close()
    throw error
  }
}
