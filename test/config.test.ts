import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../src/app/index.js'
import { startServe } from './helpers/cli-process.js'

let root: string
let counter = 0

/** A fresh working directory; `config` (an object, or raw text) becomes its plinth.config.json. */
async function workdir(config?: unknown): Promise<string> {
  const dir = join(root, `case-${counter++}`)
  await mkdir(dir)
  if (config !== undefined)
    await writeFile(join(dir, 'plinth.config.json'), typeof config === 'string' ? config : JSON.stringify(config))
  // The scripts the cases' scripted models name (a missing one is a problem of its own).
  for (const script of ['hello', 's.json']) await writeFile(join(dir, script), '[{"text": "hi"}]')
  return dir
}

/** The problems loadConfig reports (fails the test when it does not throw a ConfigError). */
function problemsOf(env: NodeJS.ProcessEnv, cwd: string): string[] {
  try {
    loadConfig(env, cwd)
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError)
    const problems = (error as ConfigError).problems
    // The message an operator reads names every problem.
    for (const problem of problems) expect((error as ConfigError).message).toContain(problem)
    return problems
  }
  throw new Error('expected loadConfig to throw a ConfigError')
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'plinth-config-'))
})

afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe('loadConfig', () => {
  it('has working defaults with no file and no environment', async () => {
    const cwd = await workdir()
    const config = loadConfig({}, cwd)
    expect(config).toMatchObject({
      port: 8080,
      host: '127.0.0.1',
      dataDir: join(cwd, 'data'),
      plugins: [],
      models: [],
      // Only what the operator set: the exec module fills in its defaults at start.
      exec: {},
      logLevel: 'info',
      bodyLimit: 1024 * 1024,
      rateLimit: { max: 600, windowMs: 60_000 },
    })
    expect(config.databaseUrl).toBeUndefined()
    expect(config.adminToken).toBeUndefined()
    expect(config.defaultModel).toBeUndefined()
    expect(config.sseHeartbeatMs).toBeGreaterThan(0)
    expect(config.fullModeTtlMs).toBeGreaterThan(0)
  })

  it('does not read the process environment or working directory when given its own', async () => {
    const cwd = await workdir()
    const previous = process.env.PORT
    process.env.PORT = 'not-a-port'
    try {
      expect(loadConfig({}, cwd).port).toBe(8080)
    } finally {
      if (previous === undefined) delete process.env.PORT
      else process.env.PORT = previous
    }
  })

  it('uses the values of ./plinth.config.json, resolving dataDir against the working directory', async () => {
    const cwd = await workdir({
      port: 9001,
      host: '0.0.0.0',
      dataDir: 'state/db',
      plugins: ['./plugins/echo'],
      models: [{ id: 'fast', provider: 'scripted', script: 'hello' }],
      defaultModel: 'fast',
      exec: { backend: 'sandbox' },
      logLevel: 'warn',
      bodyLimit: 4096,
      rateLimit: { max: 5 },
    })
    const config = loadConfig({}, cwd)
    expect(config).toMatchObject({
      port: 9001,
      host: '0.0.0.0',
      dataDir: join(cwd, 'state', 'db'),
      // Paths in the file are relative to the file.
      plugins: [join(cwd, 'plugins', 'echo')],
      models: [{ id: 'fast', provider: 'scripted', script: join(cwd, 'hello') }],
      defaultModel: 'fast',
      logLevel: 'warn',
      bodyLimit: 4096,
    })
    // A partial nested object keeps the defaults of the keys it leaves out.
    expect(config.exec).toEqual({ backend: 'sandbox' })
    expect(config.rateLimit).toMatchObject({ max: 5, windowMs: 60_000, addressMax: 2400, authFailureMax: 20 })
  })

  it('keeps an absolute dataDir as given', async () => {
    const cwd = await workdir()
    const elsewhere = join(root, 'absolute-data')
    expect(loadConfig({ PLINTH_DATA_DIR: elsewhere }, cwd).dataDir).toBe(elsewhere)
  })

  it('lets the environment win over the file', async () => {
    const cwd = await workdir({
      port: 9001,
      host: '0.0.0.0',
      logLevel: 'warn',
      rateLimit: { max: 5, windowMs: 1000 },
      plugins: ['from-file'],
    })
    const config = loadConfig(
      {
        PORT: '9002',
        HOST: '::1',
        PLINTH_LOG_LEVEL: 'debug',
        PLINTH_RATE_LIMIT_MAX: '7',
        PLINTH_PLUGINS: 'from-env',
        PLINTH_DATA_DIR: 'env-data',
        DATABASE_URL: 'postgres://plinth:pw@db.example:5432/plinth',
        PLINTH_ADMIN_TOKEN: 'a-long-enough-admin-token',
      },
      cwd,
    )
    expect(config).toMatchObject({
      port: 9002,
      host: '::1',
      logLevel: 'debug',
      plugins: ['from-env'],
      dataDir: join(cwd, 'env-data'),
      databaseUrl: 'postgres://plinth:pw@db.example:5432/plinth',
      adminToken: 'a-long-enough-admin-token',
    })
    // The environment sets one nested key; the file's sibling survives.
    expect(config.rateLimit).toMatchObject({ max: 7, windowMs: 1000 })
  })

  it('reads the security settings from the environment, with durations', async () => {
    const cwd = await workdir({ streams: { maxTotal: 100 } })
    const config = loadConfig(
      {
        PLINTH_RATE_LIMIT_ADDRESS_MAX: '900',
        PLINTH_AUTH_FAILURE_LIMIT: '5',
        PLINTH_AUTH_FAILURE_WINDOW: '10m',
        PLINTH_REQUEST_TIMEOUT: '10s',
        PLINTH_CONNECTION_TIMEOUT: '5m',
        PLINTH_MAX_CONNECTIONS_PER_ADDRESS: '32',
        PLINTH_TRUST_PROXY: 'true',
        PLINTH_METRICS_TOKEN: 'metrics-token-0123456789',
        PLINTH_SSE_MAX_PER_TOKEN: '4',
        PLINTH_SSE_MAX_LIFETIME: '15m',
        PLINTH_SSE_RECHECK_INTERVAL: '30s',
        PLINTH_SSE_DRAIN_TIMEOUT: '5s',
      },
      cwd,
    )
    expect(config).toMatchObject({
      rateLimit: { max: 600, addressMax: 900, authFailureMax: 5, authFailureWindowMs: 600_000 },
      requestTimeoutMs: 10_000,
      connectionTimeoutMs: 300_000,
      maxConnectionsPerAddress: 32,
      trustProxy: true,
      metricsToken: 'metrics-token-0123456789',
      streams: {
        maxPerToken: 4,
        maxTotal: 100,
        maxLifetimeMs: 900_000,
        recheckIntervalMs: 30_000,
        drainTimeoutMs: 5000,
      },
    })
    expect(loadConfig({ PLINTH_TRUST_PROXY: '10.0.0.0/8,127.0.0.1' }, cwd).trustProxy).toBe('10.0.0.0/8,127.0.0.1')
    expect(loadConfig({ PLINTH_TRUST_PROXY: 'loopback, ::1/128' }, cwd).trustProxy).toBe('loopback, ::1/128')
    expect(loadConfig({ PLINTH_TRUST_PROXY: '10.0.0.0/255.0.0.0' }, cwd).trustProxy).toBe('10.0.0.0/255.0.0.0')
    // Refused with the other bad settings (exit 2), not when the server starts listening.
    for (const bad of ['garbage!!', '10.0.0.0/33', '1.2.3.4/8/9', '10.0.0.1,'])
      expect(() => loadConfig({ PLINTH_TRUST_PROXY: bad }, cwd)).toThrow(/trustProxy: /)
  })

  it('refuses a short metrics token and a heartbeat that is not shorter than the connection timeout', async () => {
    const cwd = await workdir()
    expect(problemsOf({ PLINTH_METRICS_TOKEN: 'short' }, cwd)).toEqual([expect.stringMatching(/^metricsToken: /)])
    expect(problemsOf({ PLINTH_SSE_HEARTBEAT: '200s' }, cwd)).toEqual([
      expect.stringMatching(/sseHeartbeatMs .* connectionTimeoutMs/),
    ])
  })

  it('reads every retention period; deleting audit entries needs the secretKey that signs their checkpoints', async () => {
    const cwd = await workdir({ retention: { dispatchDays: 30, knowledgeDraftDays: 14 } })
    const env = {
      PLINTH_RETENTION_IDLE_CONVERSATION_DAYS: '90',
      PLINTH_RETENTION_RUN_EVENTS_DAYS: '7',
      PLINTH_RETENTION_AUDIT_DAYS: '365',
      PLINTH_SECRET_KEY: 'a-secret-key-of-some-length',
    }
    expect(loadConfig(env, cwd).retention).toEqual({
      runEventsDays: 7,
      idleConversationDays: 90,
      dispatchDays: 30,
      knowledgeDraftDays: 14,
      auditDays: 365,
    })
    expect(problemsOf({ ...env, PLINTH_SECRET_KEY: '' }, cwd)).toEqual([
      expect.stringMatching(/^retention\.auditDays: needs secretKey/),
    ])
    expect(problemsOf({ PLINTH_RETENTION_DISPATCH_DAYS: '-1' }, cwd)).toEqual([
      expect.stringMatching(/retention\/dispatchDays|retention\.dispatchDays/),
    ])
  })

  it('reads model fallbacks and retries; refuses unknown fallbacks, a model its own fallback, and cycles', async () => {
    const model = (id: string, more: object = {}) => ({ id, provider: 'scripted', script: 'hello', ...more })
    const ok = await workdir({
      models: [model('a', { fallbacks: ['b'], retries: 1 }), model('b', { fallbacks: ['c'] }), model('c')],
    })
    expect(loadConfig({}, ok).models[0]).toMatchObject({ fallbacks: ['b'], retries: 1 })
    const bad = await workdir({
      models: [
        model('a', { fallbacks: ['b'] }),
        model('b', { fallbacks: ['c'] }),
        model('c', { fallbacks: ['a'] }),
        model('d', { fallbacks: ['d', 'nowhere'] }),
      ],
    })
    const problems = problemsOf({}, bad)
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/fallbacks form a cycle \(a → b → c → a\)/),
        'models[3].fallbacks: d cannot be its own fallback',
        'models[3].fallbacks: no model with id "nowhere"',
      ]),
    )
  })

  it('refuses PGlite shared buffers the embedded database cannot start with', async () => {
    const dir = await workdir({})
    expect(problemsOf({ PLINTH_PGLITE_SHARED_BUFFERS: '2GB' }, dir)).toEqual([
      'pgliteSharedBuffers: at most 1536MB (the embedded database does not start with more), got 2GB',
    ])
    expect(loadConfig({ PLINTH_PGLITE_SHARED_BUFFERS: '1536MB' }, dir).pgliteSharedBuffers).toBe('1536MB')
  })

  it('refuses two models with one id, and a model base URL that is not http(s)', async () => {
    const dir = await workdir({
      models: [
        { id: 'a', provider: 'scripted', script: 'hello' },
        { id: 'b', provider: 'openai', baseUrl: 'not a url' },
        { id: 'a', provider: 'openai', baseUrl: 'http://127.0.0.1:1/v1' },
      ],
    })
    expect(problemsOf({}, dir)).toEqual(
      expect.arrayContaining([
        'models[2].id: "a" is already the id of models[0]',
        expect.stringMatching(/models\/1\/baseUrl|models\[1\]\.baseUrl/),
      ]),
    )
  })

  it('reads compaction settings; refuses an unknown summary model and keepRecent not under threshold', async () => {
    const model = { id: 'a', provider: 'scripted', script: 'hello' }
    const ok = await workdir({ models: [model], compaction: { model: 'a', threshold: 0.6 } })
    expect(loadConfig({ PLINTH_COMPACTION_ENABLED: 'false' }, ok).compaction).toEqual({
      model: 'a',
      threshold: 0.6,
      enabled: false,
    })
    const bad = await workdir({ models: [model], compaction: { model: 'nowhere', threshold: 0.3, keepRecent: 0.5 } })
    expect(problemsOf({}, bad)).toEqual(
      expect.arrayContaining([
        'compaction.model: no model "nowhere" in models[]',
        expect.stringMatching(/^compaction\.keepRecent: must be less than compaction\.threshold/),
      ]),
    )
  })

  it('treats an empty environment variable as unset', async () => {
    const cwd = await workdir({ port: 9001 })
    expect(loadConfig({ PORT: '', PLINTH_PLUGINS: '' }, cwd)).toMatchObject({ port: 9001, plugins: [] })
  })

  it('splits PLINTH_PLUGINS on commas, trimming blanks', async () => {
    const cwd = await workdir()
    expect(loadConfig({ PLINTH_PLUGINS: 'a, b' }, cwd).plugins).toEqual(['a', 'b'])
    expect(loadConfig({ PLINTH_PLUGINS: ' a ,, b ,' }, cwd).plugins).toEqual(['a', 'b'])
  })

  it('reads the CORS allowlist from PLINTH_CORS_ORIGINS and refuses an origin with a path', async () => {
    const cwd = await workdir()
    expect(loadConfig({}, cwd).corsOrigins).toEqual([])
    expect(loadConfig({ PLINTH_CORS_ORIGINS: 'https://app.example, http://localhost:5173' }, cwd).corsOrigins).toEqual([
      'https://app.example',
      'http://localhost:5173',
    ])
    expect(problemsOf({ PLINTH_CORS_ORIGINS: 'https://app.example/path' }, cwd)).toEqual([
      expect.stringMatching(/^corsOrigins/),
    ])
  })

  it('reads the search relevance floor (knowledge.minSimilarity) from the file or PLINTH_KNOWLEDGE_MIN_SIMILARITY', async () => {
    expect(loadConfig({}, await workdir()).knowledge.minSimilarity).toBeUndefined()
    const cwd = await workdir({ knowledge: { minSimilarity: 0.45 } })
    expect(loadConfig({}, cwd).knowledge.minSimilarity).toBe(0.45)
    expect(loadConfig({ PLINTH_KNOWLEDGE_MIN_SIMILARITY: '0.2' }, cwd).knowledge).toMatchObject({
      minSimilarity: 0.2,
      maxFileBytes: 20 * 1024 * 1024,
    })
    expect(problemsOf({ PLINTH_KNOWLEDGE_MIN_SIMILARITY: 'high' }, cwd)).toEqual([
      'PLINTH_KNOWLEDGE_MIN_SIMILARITY: expected a number like 0.3, got "high"',
    ])
    expect(problemsOf({}, await workdir({ knowledge: { minSimilarity: 2 } }))).toEqual([
      expect.stringMatching(/^knowledge\.minSimilarity: must be <= 1/),
    ])
  })

  it('reads model prices and the currency; refuses a negative price, a price without its output half and a bad currency', async () => {
    const pricing = { inputPerMillion: 2.5, outputPerMillion: 10, cachedInputPerMillion: 1.25 }
    const cwd = await workdir({ models: [{ id: 'm', provider: 'scripted', script: 's.json', pricing }] })
    expect(loadConfig({}, cwd)).toMatchObject({ currency: 'USD', models: [{ id: 'm', pricing }] })
    expect(loadConfig({ PLINTH_CURRENCY: 'EUR' }, cwd).currency).toBe('EUR')
    expect(loadConfig({ PLINTH_RUN_MAX_MODEL_CALLS: '50', PLINTH_RUN_MAX_COST: '0.25' }, cwd).runBudget).toEqual({
      maxModelCalls: 50,
      maxCost: 0.25,
    })
    expect(problemsOf({ PLINTH_RUN_MAX_MODEL_CALLS: '0' }, cwd)).toEqual([
      expect.stringMatching(/^runBudget\.maxModelCalls: must be >= 1/),
    ])
    expect(problemsOf({ PLINTH_CURRENCY: 'euros' }, cwd)).toEqual([expect.stringMatching(/^currency: /)])
    const priced = (value: unknown) =>
      workdir({ models: [{ id: 'm', provider: 'scripted', script: 's.json', pricing: value }] })
    expect(problemsOf({}, await priced({ inputPerMillion: -1, outputPerMillion: 1 }))).toEqual([
      expect.stringMatching(/^models\[0\]\.pricing\.inputPerMillion: must be >= 0/),
    ])
    expect(problemsOf({}, await priced({ inputPerMillion: 1 }))).toEqual([
      expect.stringMatching(/^models\[0\]\.pricing: .*outputPerMillion/),
    ])
  })

  it('reads booleans and integers from the environment', async () => {
    const cwd = await workdir()
    expect(loadConfig({ PLINTH_DISABLE_EXEC_TOOLS: 'true' }, cwd).exec).toEqual({ disableExecTools: true })
    expect(loadConfig({ PLINTH_DISABLE_EXEC_TOOLS: '1' }, cwd).exec.disableExecTools).toBe(true)
    expect(loadConfig({ PLINTH_DISABLE_EXEC_TOOLS: 'false' }, cwd).exec.disableExecTools).toBe(false)
    const config = loadConfig(
      {
        PLINTH_EXEC_BACKEND: 'sandbox',
        PLINTH_BODY_LIMIT: '2048',
        PLINTH_RATE_LIMIT_WINDOW: '500ms',
        PLINTH_SSE_HEARTBEAT: '250ms',
        PLINTH_FULL_MODE_TTL: '5',
      },
      cwd,
    )
    expect(config).toMatchObject({
      exec: { backend: 'sandbox' },
      bodyLimit: 2048,
      rateLimit: { max: 600, windowMs: 500 },
      sseHeartbeatMs: 250,
      fullModeTtlMs: 5000,
    })
    expect(config.deprecations).toBeUndefined()
  })

  it('reads how the embedded database is compiled: baseline by default, optimizing when asked, nothing else', async () => {
    const cwd = await workdir()
    expect(loadConfig({}, cwd).pgliteCompiler).toBe('baseline')
    expect(loadConfig({ PLINTH_PGLITE_COMPILER: 'optimizing' }, cwd).pgliteCompiler).toBe('optimizing')
    expect(loadConfig({}, await workdir({ pgliteCompiler: 'optimizing' })).pgliteCompiler).toBe('optimizing')
    expect(problemsOf({ PLINTH_PGLITE_COMPILER: 'fast' }, cwd).join('\n')).toMatch(/pgliteCompiler/)
  })

  it('still takes the deprecated millisecond names, says which name replaces each, and lets the new name win', async () => {
    const cwd = await workdir()
    const config = loadConfig(
      { PLINTH_RATE_LIMIT_WINDOW_MS: '500', PLINTH_SSE_HEARTBEAT_MS: '250', PLINTH_FULL_MODE_TTL_MS: '5000' },
      cwd,
    )
    expect(config).toMatchObject({ rateLimit: { windowMs: 500 }, sseHeartbeatMs: 250, fullModeTtlMs: 5000 })
    expect(config.deprecations).toEqual([
      expect.stringMatching(/^PLINTH_RATE_LIMIT_WINDOW_MS is deprecated: use PLINTH_RATE_LIMIT_WINDOW /),
      expect.stringMatching(/^PLINTH_SSE_HEARTBEAT_MS is deprecated: use PLINTH_SSE_HEARTBEAT /),
      expect.stringMatching(/^PLINTH_FULL_MODE_TTL_MS is deprecated: use PLINTH_FULL_MODE_TTL /),
    ])
    const both = loadConfig({ PLINTH_FULL_MODE_TTL_MS: '5000', PLINTH_FULL_MODE_TTL: '2m' }, cwd)
    expect(both.fullModeTtlMs).toBe(120_000)
    expect(both.deprecations).toEqual([expect.stringContaining('PLINTH_FULL_MODE_TTL is also set and wins')])
    // An old name keeps its old meaning (milliseconds), and its checks.
    expect(problemsOf({ PLINTH_SSE_HEARTBEAT_MS: '15s' }, cwd)).toEqual([
      'PLINTH_SSE_HEARTBEAT_MS: expected an integer, got "15s"',
    ])
  })

  it('warns once at start-up for each deprecated name set', async () => {
    const cwd = await workdir()
    const server = await startServe({ cwd, env: { PLINTH_FULL_MODE_TTL_MS: '5000' }, timeoutMs: 180_000 })
    try {
      const warnings = server
        .stdout()
        .split('\n')
        .filter((line) => line.includes('is deprecated'))
        .map((line) => JSON.parse(line) as { level: number; msg: string })
      expect(warnings).toEqual([
        expect.objectContaining({
          level: 40,
          msg: expect.stringMatching(/^PLINTH_FULL_MODE_TTL_MS is deprecated: use PLINTH_FULL_MODE_TTL /),
        }),
      ])
    } finally {
      await server.stop()
    }
  }, 200_000)

  it('resolves plugin paths in the file against the file, and in PLINTH_PLUGINS against the working directory', async () => {
    const cwd = await workdir()
    const elsewhere = await workdir({ plugins: ['./notes.js', 'rdm', 'some-package', '/abs/plugin.js'] })
    expect(loadConfig({ PLINTH_CONFIG: join(elsewhere, 'plinth.config.json') }, cwd).plugins).toEqual([
      join(elsewhere, 'notes.js'),
      'rdm',
      'some-package',
      '/abs/plugin.js',
    ])
    expect(
      loadConfig({ PLINTH_CONFIG: join(elsewhere, 'plinth.config.json'), PLINTH_PLUGINS: './mine.js' }, cwd).plugins,
    ).toEqual(['./mine.js'])
    expect(loadConfig({ PLINTH_STRICT_PLUGINS: '1' }, cwd).strictPlugins).toBe(true)
    expect(loadConfig({}, cwd).strictPlugins).toBe(false)
    expect(loadConfig({}, cwd).pgPrepare).toBe(true)
    expect(loadConfig({ PLINTH_PG_PREPARE: 'false' }, cwd).pgPrepare).toBe(false)
  })

  it('reads the file named by PLINTH_CONFIG instead of ./plinth.config.json', async () => {
    const cwd = await workdir({ port: 1111 })
    await mkdir(join(cwd, 'etc'))
    await writeFile(join(cwd, 'etc', 'custom.json'), JSON.stringify({ port: 2222 }))
    expect(loadConfig({ PLINTH_CONFIG: 'etc/custom.json' }, cwd).port).toBe(2222)
    expect(loadConfig({ PLINTH_CONFIG: join(cwd, 'etc', 'custom.json') }, root).port).toBe(2222)
  })

  it('lists every bad key at once, from the environment and the file', async () => {
    const cwd = await workdir({ bogus: 1, port: 'x', logLevel: 'loud', rateLimit: { max: 0, extra: true } })
    const problems = problemsOf({ PORT: 'abc', PLINTH_DISABLE_EXEC_TOOLS: 'maybe', PLINTH_BODY_LIMIT: '1.5' }, cwd)
    const keys = problems.map((problem) => problem.slice(0, problem.indexOf(':')))
    expect(keys.sort()).toEqual(
      [
        'PLINTH_BODY_LIMIT',
        'PLINTH_DISABLE_EXEC_TOOLS',
        'PORT',
        'bogus',
        'logLevel',
        'port',
        'rateLimit.extra',
        'rateLimit.max',
      ].sort(),
    )
    expect(problems.find((problem) => problem.startsWith('PORT:'))).toBe('PORT: expected an integer, got "abc"')
    expect(problems.find((problem) => problem.startsWith('PLINTH_DISABLE_EXEC_TOOLS:'))).toBe(
      'PLINTH_DISABLE_EXEC_TOOLS: expected true or false, got "maybe"',
    )
    expect(problems.find((problem) => problem.startsWith('bogus:'))).toBe('bogus: unknown key')
    expect(problems.find((problem) => problem.startsWith('rateLimit.extra:'))).toBe('rateLimit.extra: unknown key')
    expect(problems.find((problem) => problem.startsWith('logLevel:'))).toMatch(/must be one of .*info/)
  })

  it('rejects values out of range and a database URL that is not Postgres', async () => {
    const cwd = await workdir()
    const problems = problemsOf(
      {
        PORT: '70000',
        PLINTH_ADMIN_TOKEN: 'short',
        DATABASE_URL: 'mysql://db/x',
        PLINTH_EXEC_BACKEND: 'docker',
        PLINTH_BODY_LIMIT: '10',
      },
      cwd,
    )
    expect(problems.map((problem) => problem.slice(0, problem.indexOf(':'))).sort()).toEqual([
      'adminToken',
      'bodyLimit',
      'databaseUrl',
      'exec.backend',
      'port',
    ])
  })

  it('rejects unknown keys, also inside models', async () => {
    const cwd = await workdir({
      models: [{ id: 'm', provider: 'scripted', script: 's.json', temprature: 2 }],
      prot: 80,
    })
    const problems = problemsOf({}, cwd)
    expect(problems).toEqual(expect.arrayContaining(['prot: unknown key', 'models[0].temprature: unknown key']))
    expect(problems).toHaveLength(2)
  })

  it('takes request defaults and extra headers on a model, within range', async () => {
    const model = {
      id: 'gpt',
      provider: 'openai',
      baseUrl: 'http://127.0.0.1:1/v1',
      temperature: 0.3,
      maxTokens: 1024,
      topP: 0.9,
      stop: ['END'],
      headers: { 'x-tenant': 'acme' },
    }
    expect(loadConfig({}, await workdir({ models: [model] })).models[0]).toMatchObject(model)
    const problems = problemsOf({}, await workdir({ models: [{ ...model, temperature: 3, topP: 0 }] }))
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^models\[0\]\.temperature/),
        expect.stringMatching(/^models\[0\]\.topP/),
      ]),
    )
  })

  it('rejects a model without a known provider', async () => {
    const cwd = await workdir({ models: [{ id: 'm', provider: 'acme' }, { provider: 'openai' }] })
    const problems = problemsOf({}, cwd)
    expect(problems.some((problem) => problem.startsWith('models[0].provider:'))).toBe(true)
    expect(problems.some((problem) => problem.startsWith('models[1]') && problem.includes('id'))).toBe(true)
  })

  it('treats a missing ./plinth.config.json as optional, but an explicit PLINTH_CONFIG naming a missing file as an error', async () => {
    const cwd = await workdir()
    expect(() => loadConfig({}, cwd)).not.toThrow()
    const problems = problemsOf({ PLINTH_CONFIG: 'missing.json' }, cwd)
    expect(problems).toHaveLength(1)
    expect(problems[0]).toContain(join(cwd, 'missing.json'))
    expect(problems[0]).toMatch(/ENOENT|no such file/)
  })

  it('reports a malformed JSON file, together with bad environment values', async () => {
    const cwd = await workdir('{"port": 80,')
    const problems = problemsOf({ PORT: 'abc' }, cwd)
    expect(problems).toHaveLength(2)
    expect(problems.find((problem) => problem.startsWith(join(cwd, 'plinth.config.json')))).toMatch(/JSON/)
    expect(problems).toContain('PORT: expected an integer, got "abc"')
  })

  it('requires the file to hold a JSON object', async () => {
    const cwd = await workdir('[1, 2]')
    const problems = problemsOf({}, cwd)
    expect(problems).toEqual([`${join(cwd, 'plinth.config.json')}: must hold a JSON object`])
  })

  it('rejects a defaultModel that names no configured model', async () => {
    const cwd = await workdir({
      models: [{ id: 'fast', provider: 'scripted', script: 's.json' }],
      defaultModel: 'slow',
    })
    const problems = problemsOf({}, cwd)
    expect(problems).toEqual(['defaultModel: no model with id "slow" is configured'])
    // With the model configured it is accepted.
    const ok = await workdir({
      models: [
        { id: 'fast', provider: 'scripted', script: 's.json' },
        { id: 'slow', provider: 'openai', model: 'gpt', baseUrl: 'http://127.0.0.1:9/v1' },
      ],
      defaultModel: 'slow',
    })
    expect(loadConfig({}, ok).defaultModel).toBe('slow')
  })

  it('requires a base URL for openai and anthropic models and a script for scripted ones', async () => {
    const cwd = await workdir({
      models: [
        { id: 'a', provider: 'openai' },
        { id: 'b', provider: 'anthropic' },
        { id: 'c', provider: 'scripted' },
      ],
    })
    expect(problemsOf({}, cwd)).toEqual([
      'models[0].baseUrl: required for provider openai',
      'models[1].baseUrl: required for provider anthropic',
      'models[2].script: required for provider scripted',
    ])
  })
})
