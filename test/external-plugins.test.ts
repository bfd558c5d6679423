import { spawn } from 'node:child_process'
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { http, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'

const checkout = fileURLToPath(new URL('..', import.meta.url))

async function waitFor<T>(probe: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  for (
    const deadline = Date.now() + timeoutMs;
    Date.now() < deadline;
    await new Promise((resolve) => setTimeout(resolve, 50))
  ) {
    const value = probe()
    if (value !== undefined) return value
  }
  throw new Error('timed out')
}

/** Runs a program to completion; resolves with its exit code and output. */
function run(command: string, args: string[], cwd: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd,
      env: { ...process.env, NODE_OPTIONS: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    child.on('close', (code) => resolve({ code, output }))
  })
}

const jsPlugin = `// A plugin in a folder of its own: no node_modules, no package.json.
import { definePlugin, CommandError } from 'plinth/extension'

export default definePlugin({
  name: 'hello',
  version: '1.0.0',
  surface: '^1.2.0',
  setup(registry) {
    registry.addCommand(
      {
        id: 'hello.greet',
        title: 'Greet',
        description: 'Greets someone by name',
        paramsSchema: { type: 'object', properties: { name: { type: 'string', minLength: 1 } }, required: ['name'], additionalProperties: false },
        risk: 'low',
        exposeAsTool: {},
      },
      (params) => {
        if (params.name === 'nobody') throw new CommandError('no_one', 'there is nobody to greet')
        return { greeting: 'hello ' + params.name }
      },
    )
  },
})
`

const tsPlugin = `// A TypeScript plugin, loaded as it is (no build step).
import { definePlugin, type CommandContext, type JsonValue } from 'plinth/extension'

interface CountParams { [key: string]: JsonValue; step: number }

async function count(params: CountParams, context: CommandContext): Promise<{ total: number }> {
  const total = ((await context.kv.get<number>('total')) ?? 0) + params.step
  await context.kv.set('total', total)
  return { total }
}

export default definePlugin({
  name: 'counter',
  version: '0.1.0',
  surface: '^1.2.0',
  setup(registry) {
    registry.addCommand<CountParams>(
      {
        id: 'counter.add',
        title: 'Add',
        description: 'Adds a step to a running total',
        paramsSchema: { type: 'object', properties: { step: { type: 'integer', minimum: 1 } }, required: ['step'] },
        risk: 'medium',
        exposeAsTool: {},
        preview: (params) => 'add ' + params.step,
      },
      count,
    )
  },
})
`

const packagePlugin = `import { definePlugin } from 'plinth/extension'
export default definePlugin({
  name: 'weather',
  version: '2.0.0',
  surface: '^1.2.0',
  setup(registry) {
    registry.addCommand(
      { id: 'weather.today', title: 'Today', description: 'The weather today', paramsSchema: { type: 'object', properties: { city: { type: 'string' } } }, risk: 'low', exposeAsTool: {} },
      (params) => ({ city: params.city ?? 'Paris', sky: 'clear' }),
    )
  },
})
`

// The plugin author's own tests, with plinth/testing (node:test, no Plinth server).
const jsPluginTest = `import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setupPlugin, runScriptedAgent, offeredTools } from 'plinth/testing'
import plugin from 'weather-plinth'

test('the command answers, and a scripted model can call it as a tool', async () => {
  const harness = await setupPlugin(plugin)
  assert.deepEqual(await harness.dispatch('weather.today', { city: 'Oslo' }), { city: 'Oslo', sky: 'clear' })
  assert.deepEqual(offeredTools(harness).map((tool) => tool.name), ['weather__today'])
  const { steps, answer } = await runScriptedAgent(harness, [
    { toolCalls: [{ name: 'weather__today', arguments: '{"city":"Lima"}' }, { name: 'weather__tomorrow', arguments: {} }] },
    { text: 'Clear in Lima.' },
  ])
  assert.equal(steps[0].status, 'ok')
  assert.deepEqual(steps[0].output, { city: 'Lima', sky: 'clear' })
  assert.equal(steps[1].output.error.code, 'unknown_tool')
  assert.equal(answer, 'Clear in Lima.')
})
`

const tsPluginTest = `import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setupPlugin, runScriptedAgent, type AgentStep } from 'plinth/testing'
import plugin from './counter.ts'

test('medium risk asks; a rejection is what the model reads; the kv keeps the total', async () => {
  const harness = await setupPlugin(plugin)
  const asked: string[] = []
  const { steps } = await runScriptedAgent(
    harness,
    [{ toolCalls: [{ name: 'counter__add', arguments: { step: 2 } }, { name: 'counter__add', arguments: { step: 3 } }, { name: 'counter__add', arguments: { step: 0 } }] }],
    { approve: ({ preview }) => { asked.push(preview ?? ''); return preview !== 'add 3' } },
  )
  assert.deepEqual(asked, ['add 2', 'add 3'])
  assert.deepEqual(steps.map((step: AgentStep) => step.status), ['ok', 'rejected', 'error'])
  assert.equal((steps[2]!.output as { error: { code: string } }).error.code, 'invalid_params')
  assert.equal(await harness.kv.get('total'), 2)
})
`

// Plugins written outside the checkout, loaded by a Plinth installed as a package (built, as `npm pack`
// ships it) and by this checkout run from source; tested by their authors with plinth/testing.
describe('plugins outside the repository', () => {
  let root: string
  let installed: string
  let project: string
  let server: ServeProcess | undefined

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'plinth-external-'))
    // An installed copy of Plinth: what `npm i plinth` puts in node_modules (built, with its dependencies).
    installed = join(root, 'project', 'node_modules', 'plinth')
    project = join(root, 'project')
    await mkdir(installed, { recursive: true })
    // dist/ is the checkout's build (test/global-setup.ts compiles it).
    for (const entry of ['package.json', 'bin', 'migrations', 'openapi', 'dist'])
      await cp(join(checkout, entry), join(installed, entry), { recursive: true })
    await symlink(join(checkout, 'node_modules'), join(installed, 'node_modules'), 'dir')

    // The operator's folder (no package.json): a config next to two plugins, and a plugin package.
    await mkdir(join(project, 'plugins'))
    await writeFile(join(project, 'plugins', 'hello.js'), jsPlugin)
    await writeFile(join(project, 'plugins', 'counter.ts'), tsPlugin)
    await writeFile(join(project, 'plugins', 'broken.js'), `export const notAPlugin = 1\n`)
    const pkg = join(project, 'node_modules', 'weather-plinth')
    await mkdir(pkg, { recursive: true })
    await writeFile(
      join(pkg, 'package.json'),
      JSON.stringify({
        name: 'weather-plinth',
        version: '2.0.0',
        type: 'module',
        exports: { '.': { import: './index.js' } },
        peerDependencies: { plinth: '*' },
      }),
    )
    await writeFile(join(pkg, 'index.js'), packagePlugin)
    // A package whose module exports no default definePlugin(...).
    const empty = join(project, 'node_modules', 'not-a-plugin')
    await mkdir(empty, { recursive: true })
    await writeFile(
      join(empty, 'package.json'),
      JSON.stringify({ name: 'not-a-plugin', version: '1.0.0', main: 'index.js' }),
    )
    await writeFile(join(empty, 'index.js'), 'exports.helper = () => 42\n')
    await writeFile(
      join(project, 'plinth.config.json'),
      JSON.stringify({ plugins: ['./plugins/hello.js', './plugins/counter.ts', 'weather-plinth'] }),
    )
  }, 180_000)

  afterAll(async () => {
    await server?.kill()
    await rm(root, { recursive: true, force: true })
  })

  it(
    'the installed Plinth loads a .js and a .ts plugin by path and a plugin package; their commands work over HTTP',
    { timeout: 180_000 },
    async () => {
      server = await startServe({
        cwd: project,
        bin: join(installed, 'bin', 'plinth.js'),
        env: { PLINTH_FROM_SOURCE: '0' },
      })
      // The first start creates a user and prints its token just after the listening line.
      const started = server
      const token = await waitFor(() =>
        started
          .stdout()
          .split('\n')
          .find((line) => line.startsWith('plt_')),
      )
      expect(server.stderr()).toBe('')
      const loaded = server
        .stdout()
        .split('\n')
        .filter((line) => line.includes('"msg":"plugin '))
        .map((line) => JSON.parse(line).msg)
      expect(loaded).toEqual([
        'plugin hello 1.0.0 loaded',
        'plugin counter 0.1.0 loaded',
        'plugin weather 2.0.0 loaded',
      ])

      const greet = await http(server.url, 'POST', '/api/commands/hello.greet', {
        token,
        body: { entrance: 'button', params: { name: 'Ada' } },
      })
      expect(greet.body).toMatchObject({ status: 'succeeded', result: { greeting: 'hello Ada' } })
      // Its CommandError is the server's own class: a 422 with the plugin's code, not a crash.
      const nobody = await http(server.url, 'POST', '/api/commands/hello.greet', {
        token,
        body: { entrance: 'button', params: { name: 'nobody' } },
      })
      expect(nobody.status).toBe(422)
      expect(nobody.body).toMatchObject({ code: 'command_error', commandCode: 'no_one' })
      const weather = await http(server.url, 'POST', '/api/commands/weather.today', {
        token,
        body: { entrance: 'button', params: {} },
      })
      expect(weather.body).toMatchObject({ status: 'succeeded', result: { sky: 'clear' } })
      const count = await http(server.url, 'POST', '/api/commands/counter.add', {
        token,
        body: { entrance: 'button', params: { step: 2 } },
      })
      expect(count.status).toBe(202) // medium risk: a person approves it first
      const catalog = await http(server.url, 'GET', '/api/commands', { token })
      expect(
        catalog.body.items
          .filter((command: { plugin: string }) => ['hello', 'counter', 'weather'].includes(command.plugin))
          .map((command: { id: string }) => command.id)
          .sort(),
      ).toEqual(['counter.add', 'hello.greet', 'weather.today'])
      // No plugin warning (where the sandbox cannot reach this temporary directory, exec tools are off: a warning of its own).
      expect(
        (await http(server.url, 'GET', '/readyz')).body.warnings.filter(
          (warning: string) => !warning.startsWith('exec tools are off'),
        ),
      ).toEqual([])
      expect(await server.stop()).toBe(0)
      server = undefined
    },
  )

  it(
    'a refused plugin is reported once at start and on /readyz; --strict-plugins and PLINTH_STRICT_PLUGINS make it fatal',
    { timeout: 180_000 },
    async () => {
      const plugins = './plugins/hello.js,./plugins/broken.js,not-installed-anywhere,not-a-plugin'
      server = await startServe({
        cwd: project,
        bin: join(installed, 'bin', 'plinth.js'),
        env: { PLINTH_FROM_SOURCE: '0', PLINTH_PLUGINS: plugins },
      })
      const started = server
      const warnings = await waitFor(() =>
        started.stderr().trim().split('\n').length >= 3 ? started.stderr().trim().split('\n') : undefined,
      )
      expect(warnings).toEqual([
        expect.stringMatching(
          /^plinth: WARNING: plugin \.\/plugins\/broken\.js refused: its module does not export definePlugin\(\{ name, version, surface, setup \}\) as default$/,
        ),
        expect.stringMatching(
          /^plinth: WARNING: plugin not-installed-anywhere refused: cannot find the package not-installed-anywhere from /,
        ),
        expect.stringMatching(/^plinth: WARNING: plugin not-a-plugin refused: its module does not export definePlugin/),
      ])
      const ready = await http(server.url, 'GET', '/readyz')
      expect(ready.status).toBe(200)
      expect(ready.body.warnings.filter((warning: string) => !warning.startsWith('exec tools are off'))).toEqual([
        expect.stringMatching(/^plugin \.\/plugins\/broken\.js refused: /),
        expect.stringMatching(/^plugin not-installed-anywhere refused: /),
        expect.stringMatching(/^plugin not-a-plugin refused: /),
      ])
      // The good one still loaded.
      expect(server.stdout()).toContain('plugin hello 1.0.0 loaded')
      expect(await server.stop()).toBe(0)
      server = undefined

      const strict = await runPlinth(['serve'], {
        cwd: project,
        bin: join(installed, 'bin', 'plinth.js'),
        args: ['--strict-plugins'],
        env: { PLINTH_FROM_SOURCE: '0', PLINTH_PLUGINS: plugins, PORT: '0' },
      })
      expect(strict.code).toBe(1)
      expect(strict.stderr).toMatch(/plugin \.\/plugins\/broken\.js refused: .*strict plugins/)
      const strictEnv = await runPlinth(['serve'], {
        cwd: project,
        bin: join(installed, 'bin', 'plinth.js'),
        env: { PLINTH_FROM_SOURCE: '0', PLINTH_PLUGINS: './plugins/broken.js', PLINTH_STRICT_PLUGINS: '1', PORT: '0' },
      })
      expect(strictEnv.code).toBe(1)
      expect(strictEnv.stderr).toMatch(/refused/)
    },
  )

  it(
    'this checkout run from source (npx plinth without a build) loads the same plugins',
    { timeout: 180_000 },
    async () => {
      server = await startServe({ cwd: project, env: { PLINTH_FROM_SOURCE: '1' } })
      expect(server.stderr()).toBe('')
      const loaded = server
        .stdout()
        .split('\n')
        .filter((line) => line.includes('"msg":"plugin '))
        .map((line) => JSON.parse(line).msg)
      expect(loaded).toEqual([
        'plugin hello 1.0.0 loaded',
        'plugin counter 0.1.0 loaded',
        'plugin weather 2.0.0 loaded',
      ])
      expect(await server.stop()).toBe(0)
      server = undefined
    },
  )

  it(
    'plugin authors test with plinth/testing (JS and TS), and the TypeScript plugin type-checks against the installed types',
    { timeout: 180_000 },
    async () => {
      await writeFile(join(project, 'weather.test.js'), jsPluginTest)
      const js = await run(process.execPath, ['--test', 'weather.test.js'], project)
      expect(js.code, js.output).toBe(0)
      expect(js.output).toMatch(/# pass 1/)

      await writeFile(join(project, 'plugins', 'counter.test.ts'), tsPluginTest)
      const tsx = join(checkout, 'node_modules', 'tsx', 'dist', 'loader.mjs')
      const ts = await run(
        process.execPath,
        ['--import', `file://${tsx}`, '--test', 'plugins/counter.test.ts'],
        project,
      )
      expect(ts.code, ts.output).toBe(0)
      expect(ts.output).toMatch(/# pass 1/)

      await writeFile(
        join(project, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            module: 'NodeNext',
            moduleResolution: 'NodeNext',
            target: 'ES2022',
            strict: true,
            noEmit: true,
            allowImportingTsExtensions: true,
            skipLibCheck: true,
            types: [],
          },
          include: ['plugins/counter.ts'],
        }),
      )
      const checked = await run(
        process.execPath,
        [join(checkout, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'],
        project,
      )
      expect(checked.code, checked.output).toBe(0)
      // And a mistake in the plugin is caught by those types.
      await writeFile(join(project, 'plugins', 'counter.ts'), tsPlugin.replace("risk: 'medium'", "risk: 'severe'"))
      const wrong = await run(
        process.execPath,
        [join(checkout, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'],
        project,
      )
      expect(wrong.code).not.toBe(0)
      expect(wrong.output).toMatch(/severe/)
      await writeFile(join(project, 'plugins', 'counter.ts'), tsPlugin)
      expect(await readFile(join(installed, 'dist', 'src', 'testing', 'index.d.ts'), 'utf8')).toMatch(
        /runScriptedAgent/,
      )
    },
  )
})
