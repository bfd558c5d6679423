import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { http, startServe, type ServeProcess } from './helpers/cli-process.js'

const checkout = fileURLToPath(new URL('..', import.meta.url))
const guide = readFileSync(join(checkout, 'docs/guides/writing-a-plugin.md'), 'utf8')

/** Runs a program to completion; resolves with its exit code and output. */
function run(
  command: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd,
      env: { ...process.env, NODE_OPTIONS: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    child.on('close', (code) => resolve({ code, output }))
  })
}

/** The plugin guide (docs/guides/writing-a-plugin.md): the example plugin and the tsconfig it is compiled with. */
function guideExample(): { plugin: string; tsconfig: string } {
  const plugin = /```ts\n([\s\S]*?)```/.exec(guide)?.[1]
  const tsconfig = /cat > tsconfig\.json <<'JSON'\n([\s\S]*?)\nJSON/.exec(guide)?.[1]
  if (!plugin || !tsconfig)
    throw new Error('docs/guides/writing-a-plugin.md no longer shows the example plugin and its tsconfig')
  return { plugin, tsconfig }
}

const npm = (args: string[], cwd: string): Promise<{ code: number | null; output: string }> =>
  run('npm', [...args, '--no-audit', '--no-fund', '--prefer-offline'], cwd, { npm_config_update_notifier: 'false' })

// A plugin author's path, as the plugin guide writes it: Plinth from a clean clone (packed with `npm pack`,
// which builds it through `prepare`), a plugin project that installs the tarball, the guide's plugin
// compiled by tsc, and served by the installed `plinth serve`.
describe('the plugin author path', () => {
  let root: string | undefined
  let server: ServeProcess | undefined

  afterAll(async () => {
    await server?.kill()
    if (root) await rm(root, { recursive: true, force: true })
  })

  it(
    'a clone packs (building dist/), the tarball installs, the guide plugin compiles and its command answers over HTTP',
    { timeout: 600_000 },
    async () => {
      root = await mkdtemp(join(tmpdir(), 'plinth-author-'))
      const clone = join(root, 'plinth')
      const cloned = await run('git', ['clone', '--quiet', checkout, clone], root)
      expect(cloned.code, cloned.output).toBe(0)
      // `npm ci` in the clone takes minutes on a busy machine: the checkout's own dependencies stand in
      // for it (the same lockfile). The build itself runs in the clone, from its sources, through prepare.
      await symlink(join(checkout, 'node_modules'), join(clone, 'node_modules'), 'dir')
      const packed = await npm(['pack', '--pack-destination', root], clone)
      expect(packed.code, packed.output).toBe(0)
      const tarball = (await readdir(root)).find((name) => /^plinth-.*\.tgz$/.test(name))
      expect(tarball, packed.output).toBeDefined()

      const project = join(root, 'notes-plugin')
      await mkdir(join(project, 'src'), { recursive: true })
      await writeFile(
        join(project, 'package.json'),
        JSON.stringify({ name: 'notes-plugin', version: '1.0.0', type: 'module', private: true }),
      )
      const typescript = (
        JSON.parse(readFileSync(join(checkout, 'node_modules', 'typescript', 'package.json'), 'utf8')) as {
          version: string
        }
      ).version
      const installed = await npm(['i', '-D', join('..', tarball ?? ''), `typescript@${typescript}`], project)
      expect(installed.code, installed.output).toBe(0)

      const { plugin, tsconfig } = guideExample()
      await writeFile(join(project, 'src', 'notes.ts'), plugin)
      await writeFile(join(project, 'tsconfig.json'), tsconfig)
      const compiled = await run(process.execPath, [join(project, 'node_modules', 'typescript', 'bin', 'tsc')], project)
      expect(compiled.code, compiled.output).toBe(0)
      await writeFile(join(project, 'plinth.config.json'), JSON.stringify({ plugins: ['./dist/notes.js'] }))

      server = await startServe({
        cwd: project,
        bin: join(project, 'node_modules', 'plinth', 'bin', 'plinth.js'),
        env: { PLINTH_FROM_SOURCE: '0' },
      })
      const started = server
      const token = await waitFor(() =>
        started
          .stdout()
          .split('\n')
          .find((line) => line.startsWith('plt_')),
      )
      expect(server.stdout()).toContain('plugin notes 1.0.0 loaded')
      const created = await http(server.url, 'POST', '/api/projects', { token, body: { name: 'Apollo' } })
      expect(created.status).toBe(201)
      // Medium risk: the preview is asked of a person, and the approved command saves the note.
      const asked = await http(server.url, 'POST', '/api/commands/notes.add', {
        token,
        body: { entrance: 'button', projectId: created.body.id, params: { text: 'launch at dawn' } },
      })
      expect(asked.status).toBe(202)
      expect(JSON.stringify(asked.body)).toContain('Add the note \\"launch at dawn\\"')
      const approved = await http(server.url, 'POST', `/api/decisions/${asked.body.decision.id}`, {
        token,
        body: { decision: 'approve' },
      })
      expect(approved.body).toMatchObject({ dispatch: { status: 'succeeded', result: { saved: true } } })
      expect(await server.stop()).toBe(0)
      server = undefined
    },
  )
})

async function waitFor<T>(probe: () => T | undefined, timeoutMs = 30_000): Promise<T> {
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
