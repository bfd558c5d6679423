import { execFile } from 'node:child_process'
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { startTestServer, type TestServer } from './helpers/test-server.js'

const run = promisify(execFile)
const root = fileURLToPath(new URL('..', import.meta.url))
const marker = '<!-- typed-client-example -->'
/** Where the examples are written: the clients guide. */
const guide = join(root, 'docs/guides/clients.md')

/** A guide's example: the ```ts block right after the marker comment, verbatim. */
function exampleAfter(text: string, marker: string): string {
  const start = text.indexOf(marker)
  if (start < 0) throw new Error(`docs/guides/clients.md has no ${marker}`)
  const block = /^\s*```ts\n([\s\S]*?)\n```/.exec(text.slice(start + marker.length))
  if (!block) throw new Error(`no ts code block right after ${marker}`)
  return block[1]!
}
const typedClientExample = (text: string): string => exampleAfter(text, marker)

// The clients guide's two examples are what a reader copies: each compiles with tsc (strict, no casts)
// and runs against a real server. One project, one tsc run over both files and one server serve both.
describe('the examples of the clients guide', () => {
  let store: Store
  let server: TestServer
  let dir: string
  /** The typed-client example (plinth/openapi + openapi-fetch) and the plinth/client example. */
  let typedFile: string
  let clientFile: string
  /** tsc over both examples, started once; each test reads what concerns its file. */
  let checked: Promise<string>

  beforeAll(async () => {
    store = await openTestStore('pglite')
    server = await startTestServer(store, {
      models: [new ScriptedModel({ id: 'scripted', turns: [{ text: 'Yes, it is up.' }], whenExhausted: 'loop' })],
    })
    // A project of its own, as a reader's would be: `plinth/openapi` and `openapi-fetch` resolve as installed packages.
    dir = await mkdtemp(join(tmpdir(), 'plinth-client-examples-'))
    await mkdir(join(dir, 'node_modules', '@types'), { recursive: true })
    await symlink(root, join(dir, 'node_modules', 'plinth'))
    await symlink(join(root, 'node_modules', 'openapi-fetch'), join(dir, 'node_modules', 'openapi-fetch'))
    await symlink(join(root, 'node_modules', '@types', 'node'), join(dir, 'node_modules', '@types', 'node'))
    await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
    const compilerOptions = {
      target: 'ES2023',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      noUncheckedIndexedAccess: true,
      noEmit: true,
      skipLibCheck: true,
      types: ['node'],
    }
    await writeFile(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ compilerOptions, files: ['typed-client.ts', 'plinth-client.ts'] }),
    )
    const text = await readFile(guide, 'utf8')
    typedFile = join(dir, 'typed-client.ts')
    await writeFile(typedFile, typedClientExample(text))
    // `plinth/client` resolves to the built package; here the import points at its sources.
    clientFile = join(dir, 'plinth-client.ts')
    const example = exampleAfter(text, '<!-- plinth-client-example -->')
    expect(example).toContain("from 'plinth/client'")
    await writeFile(
      clientFile,
      example.replace("from 'plinth/client'", `from ${JSON.stringify(join(root, 'src', 'client', 'index.js'))}`),
    )
    checked = run(
      process.execPath,
      [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(dir, 'tsconfig.json')],
      { cwd: dir },
    ).then(
      (result) => result.stdout,
      (error: { stdout?: string; stderr?: string }) => `${error.stdout ?? ''}${error.stderr ?? ''}`,
    )
    // Settled by the tests; never an unhandled rejection meanwhile.
    void checked.catch(() => undefined)
  })
  afterAll(async () => {
    await checked?.catch(() => undefined)
    await server?.close()
    await store?.close()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  /**
   * tsc's diagnostics, less those about the other example: a diagnostic starts at the line's start
   * (`file.ts(3,5): error …`), its continuation lines are indented. One about no file concerns both.
   */
  const diagnosticsBesides = async (other: string): Promise<string> => {
    const diagnostics: string[] = []
    for (const line of (await checked).split('\n')) {
      if (/^\s/.test(line) && diagnostics.length > 0) diagnostics[diagnostics.length - 1] += `\n${line}`
      else if (line.trim() !== '') diagnostics.push(line)
    }
    return diagnostics.filter((diagnostic) => !diagnostic.startsWith(`${basename(other)}(`)).join('\n')
  }

  describe('the typed-client example', () => {
    it('type-checks with tsc against the generated types', { timeout: 120_000 }, async () => {
      expect(await diagnosticsBesides(clientFile)).toBe('')
    })

    it('runs against a listening server and prints the settled run and its answer', { timeout: 120_000 }, async () => {
      const user = await server.createUser()
      const { stdout } = await run(process.execPath, ['--import', 'tsx', typedFile], {
        cwd: root,
        env: { ...process.env, PLINTH_URL: server.url, PLINTH_TOKEN: user.token },
      })
      expect(stdout.trim()).toBe('completed: Yes, it is up.')
      const runs = await server.request('GET', '/api/runs', { token: user.token })
      expect(runs.body.items).toMatchObject([{ status: 'completed' }])
    })
  })

  describe('the plinth/client example', () => {
    it('type-checks with tsc', { timeout: 120_000 }, async () => {
      expect(await diagnosticsBesides(typedFile)).toBe('')
    })

    it('streams the answer and reports a bad request by its code', { timeout: 120_000 }, async () => {
      const user = await server.createUser()
      const { stdout } = await run(process.execPath, ['--import', 'tsx', clientFile], {
        cwd: root,
        env: { ...process.env, PLINTH_URL: server.url, PLINTH_TOKEN: user.token },
      })
      expect(stdout.trim()).toBe('Yes, it is up. (and an empty input is validation_failed)')
    })
  })
})
