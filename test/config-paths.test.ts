import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../src/app/index.js'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { runPlinth } from './helpers/cli-process.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer } from './helpers/test-server.js'

// Every path in the config file is relative to the file; a bad one is a start-up error naming its key.
describe('paths in the config file', () => {
  let root: string
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'plinth-config-paths-'))
    await mkdir(join(root, 'etc', 'plinth'), { recursive: true })
    await mkdir(join(root, 'elsewhere'))
    await writeFile(
      join(root, 'etc', 'plinth', 'turns.json'),
      JSON.stringify({ turns: [{ text: 'from the script next to the config' }] }),
    )
  })
  afterAll(async () => rm(root, { recursive: true, force: true }))

  const writeConfig = (config: object) =>
    writeFile(join(root, 'etc', 'plinth', 'plinth.config.json'), JSON.stringify(config))
  const env = () => ({ PLINTH_CONFIG: join(root, 'etc', 'plinth', 'plinth.config.json') })

  it('resolves models[].script, plugins, dataDir and exec.workRoot against the file, not the working directory', async () => {
    await writeConfig({
      models: [{ id: 'local', provider: 'scripted', script: './turns.json' }],
      dataDir: './data',
      exec: { workRoot: 'work' },
      plugins: ['./my-plugin.js'],
    })
    const config = loadConfig(env(), join(root, 'elsewhere'))
    expect(config.models?.[0]?.script).toBe(join(root, 'etc', 'plinth', 'turns.json'))
    expect(config.dataDir).toBe(join(root, 'etc', 'plinth', 'data'))
    expect(config.exec.workRoot).toBe(join(root, 'etc', 'plinth', 'work'))
    expect(config.plugins).toEqual([join(root, 'etc', 'plinth', 'my-plugin.js')])
    // The environment's paths stay relative to the working directory.
    expect(loadConfig({ ...env(), PLINTH_DATA_DIR: './state' }, join(root, 'elsewhere')).dataDir).toBe(
      join(root, 'elsewhere', 'state'),
    )
  })

  it('a missing or unreadable script is a problem naming its key (models[1].script)', async () => {
    await writeConfig({
      models: [
        { id: 'a', provider: 'scripted', script: './turns.json' },
        { id: 'b', provider: 'scripted', script: './missing.json' },
      ],
    })
    let problems: string[] = []
    try {
      loadConfig(env(), join(root, 'elsewhere'))
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      problems = error.problems
    }
    expect(problems.join('\n')).toContain('models[1].script')
    expect(problems.join('\n')).toContain(join(root, 'etc', 'plinth', 'missing.json'))
  })

  it('`plinth serve` refuses to start, naming the key, with no bare ENOENT', async () => {
    await writeConfig({
      models: [
        { id: 'a', provider: 'scripted', script: './turns.json' },
        { id: 'b', provider: 'scripted', script: './missing.json' },
      ],
    })
    const result = await runPlinth(['serve'], {
      cwd: join(root, 'elsewhere'),
      env: { ...env(), PORT: '0' },
      timeoutMs: 120_000,
    })
    expect(result.code).not.toBe(0)
    expect(result.stderr).toContain('models[1].script')
    expect(result.stderr).not.toMatch(/^\s+at /m)
  }, 150_000)
})

describe('a run whose model is no longer configured', () => {
  const classified = new URL('./__fixtures__/plugins/classified.ts', import.meta.url).pathname
  let store: Store
  let server: TestServer | undefined
  beforeAll(async () => {
    store = await openTestStore('pglite')
  })
  afterAll(async () => {
    await server?.close()
    await store?.close()
  })

  const start = async (models: ScriptedModel[]) => {
    await server?.close()
    server = await startTestServer(store, { models, plugins: [classified] })
    return server
  }
  const waitFor = async (token: string, runId: string, statuses: string[]) => {
    for (const deadline = Date.now() + 30_000; ;) {
      const run = (await server!.request('GET', `/api/runs/${runId}`, { token })).body
      if (statuses.includes(run.status)) return run
      if (Date.now() > deadline) throw new Error(`run ${runId} is ${run.status}`)
      await new Promise((resolve) => setTimeout(resolve, 30))
    }
  }

  it('fails unknown_model (not internal), refuses to resume until the model is back, then resumes', async () => {
    const turns = [
      { toolCalls: [{ name: 'classified__touch', arguments: { path: '/etc/motd' } }] },
      { text: 'touched' },
    ]
    let current = await start([new ScriptedModel({ id: 'old-model', turns })])
    const alice = await current.createUser()
    const projectId = (await current.request('POST', '/api/projects', { token: alice.token, body: { name: 'models' } }))
      .body.id
    const conversationId = (
      await current.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
    ).body.id
    const created = await current.request('POST', `/api/conversations/${conversationId}/runs`, {
      token: alice.token,
      body: { input: 'touch', model: 'old-model', knowledge: { autoInject: false } },
    })
    const waiting = await waitFor(alice.token, created.body.id, ['requires_action'])
    const decisionId = waiting.requiredAction.decisions[0].decisionId

    // The operator replaces the models; the waiting run is approved on the new configuration.
    current = await start([new ScriptedModel({ id: 'new-model', turns: [{ text: 'new' }] })])
    expect(
      (
        await current.request('POST', `/api/decisions/${decisionId}`, {
          token: alice.token,
          body: { decision: 'approve' },
        })
      ).status,
    ).toBe(200)
    const failed = await waitFor(alice.token, created.body.id, ['failed', 'completed'])
    expect(failed.status).toBe('failed')
    expect(failed.error).toMatchObject({ code: 'unknown_model' })
    expect(failed.error.message).toContain('old-model')

    const refused = await current.request('POST', `/api/runs/${created.body.id}/resume`, { token: alice.token })
    expect(refused.status).toBe(422)
    expect(refused.body.code).toBe('unknown_model')

    current = await start([new ScriptedModel({ id: 'old-model', turns: [{ text: 'back again' }] })])
    const resumed = await current.request('POST', `/api/runs/${created.body.id}/resume`, { token: alice.token })
    expect(resumed.status).toBe(200)
    expect((await waitFor(alice.token, created.body.id, ['completed', 'failed'])).status).toBe('completed')
  }, 120_000)
})
