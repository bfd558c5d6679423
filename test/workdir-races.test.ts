import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createPluginLogger } from '../src/cmdbus/index.js'
import { defaultExecSettings, ExecService, type ExecResult } from '../src/exec/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore } from './helpers/engines.js'
import { sandboxAvailable } from './helpers/sandbox.js'
import { startTestServer, type TestServer } from './helpers/test-server.js'

const probe = await sandboxAvailable('work-directory race suite')
// renameat2(2)'s syscall number: the swapper calls it through perl, which every Debian has.
const renameat2 = ({ x64: 316, arm64: 276 } as Record<string, number>)[process.arch]
if (renameat2 === undefined)
  console.warn(`\n[plinth tests] work-directory race suite skipped: no renameat2 number for ${process.arch}\n`)

/**
 * A program in the sandbox that swaps `a` (a real directory) and `swap` (a symlink to a host directory)
 * with renameat2(RENAME_EXCHANGE) as fast as it can, until it is cancelled: the attack of a sandboxed
 * program on a server that checks a path and then uses it (docs/security.md, "work directories").
 */
function swapperScript(hostDir: string, file: string, content: string): string {
  return [
    `mkdir -p a && printf %s ${JSON.stringify(content)} > a/${file} && rm -f swap && ln -s ${hostDir} swap && echo ready`,
    `exec perl -e 'my ($a, $b) = ("a", "swap"); while (1) { syscall(${renameat2}, -100, $a, -100, $b, 2) }'`,
  ].join('\n')
}

/** Starts the swapper in the conversation and resolves once it is swapping; `stop()` cancels it. */
async function startSwapper(
  exec: ExecService,
  conversationId: string,
  script: string,
): Promise<{ stop: () => Promise<ExecResult> }> {
  const abort = new AbortController()
  let readyResolve!: () => void
  const ready = new Promise<void>((resolve) => (readyResolve = resolve))
  const running = exec.run(
    { conversationId, projectId: null, argv: ['/bin/bash', '-c', script], timeoutMs: 300_000 },
    { signal: abort.signal, onOutput: (_stream, text) => text.includes('ready') && readyResolve() },
  )
  await Promise.race([
    ready,
    running.then((result) => Promise.reject(new Error(`the swapper ended early: ${JSON.stringify(result)}`))),
  ])
  return {
    stop: async () => {
      abort.abort()
      const result = await running
      // It was still swapping when cancelled (a swapper that died early proves nothing).
      expect(result.exitCode, result.stderr).toBeNull()
      return result
    },
  }
}

// Regression (docs/security.md#work-directories): the server acted by path on a tree the sandboxed
// program changes concurrently.
describe.skipIf(!probe.ok || renameat2 === undefined)(
  'the server never follows a swapped directory out of the work directory',
  () => {
    let store: Store
    let exec: ExecService
    let dataDir: string
    let hostDir: string
    const secret = 'HOST-SECRET-9f1c2e'
    const attempts = 300

    beforeAll(async () => {
      store = await openTestStore('pglite')
      dataDir = await mkdtemp(join(tmpdir(), 'plinth-race-'))
      await chmod(dataDir, 0o711)
      // A host directory only the server's user may enter, holding a secret and root-owned files.
      hostDir = await mkdtemp(join(tmpdir(), 'plinth-race-host-'))
      await chmod(hostDir, 0o700)
      await writeFile(join(hostDir, 'f.txt'), secret, { mode: 0o600 })
      exec = await ExecService.create({
        store,
        dataDir,
        log: createPluginLogger(pino({ level: 'silent' }), 'exec'),
        settings: { ...defaultExecSettings, backend: 'sandbox', timeoutMs: 300_000 },
      })
      expect(exec.probe.ok).toBe(true)
    })
    afterAll(async () => {
      await exec?.stop()
      await store?.close()
      await rm(dataDir, { recursive: true, force: true })
      await rm(hostDir, { recursive: true, force: true })
    })

    it('a read never returns a host file (core.read_file’s path)', async () => {
      const conversation = '01ARZ3NDEKTSV4RRFFQ69G5R01'
      const swapper = await startSwapper(exec, conversation, swapperScript(hostDir, 'f.txt', 'benign'))
      const seen = new Set<string>()
      try {
        for (let index = 0; index < attempts; index++) {
          const read = await exec.workdirs.read(conversation, 'a/f.txt', { limit: 1024 }).then(
            (result) => result.bytes.toString(),
            (error: Error) => `error:${error.name}`,
          )
          seen.add(read)
          expect(read).not.toBe(secret)
        }
      } finally {
        await swapper.stop()
      }
      // The race was really run: the file was read as it is, and refused while swapped.
      expect(seen.has('benign')).toBe(true)
    })

    it('a write never creates a file in a host directory (the files API’s PUT, write_file)', async () => {
      const conversation = '01ARZ3NDEKTSV4RRFFQ69G5R02'
      const swapper = await startSwapper(exec, conversation, swapperScript(hostDir, 'f.txt', 'benign'))
      let written = 0
      try {
        for (let index = 0; index < attempts; index++) {
          await exec.workdirs.write(conversation, `a/new-${index}.txt`, 'x').then(
            () => written++,
            () => undefined,
          )
        }
      } finally {
        await swapper.stop()
      }
      expect((await readdir(hostDir)).filter((name) => name.startsWith('new-'))).toEqual([])
      expect(written).toBeGreaterThan(0)
    })

    it('preparing the directory for a sandboxed execution never hands a host file to the sandbox user', async () => {
      const conversation = '01ARZ3NDEKTSV4RRFFQ69G5R03'
      const owned = join(hostDir, 'owned')
      await mkdir(owned, { recursive: true })
      const files = Array.from({ length: 20 }, (_, index) => join(owned, `file-${index}`))
      for (const file of files) await writeFile(file, 'root only', { mode: 0o600 })
      // The tree the server hands over: a directory the swapper toggles with a link to `owned`.
      const swapper = await startSwapper(exec, conversation, swapperScript(owned, 'g.txt', 'benign'))
      try {
        for (let index = 0; index < 40; index++) {
          // As after a `direct` execution: the tree is walked and handed over before the sandboxed one.
          await exec.workdirs.markForeign(conversation)
          const result = await exec.run({
            conversationId: conversation,
            projectId: null,
            argv: ['/bin/true'],
            timeoutMs: 30_000,
          })
          expect(result.exitCode).toBe(0)
        }
      } finally {
        await swapper.stop()
      }
      for (const file of [owned, ...files]) expect((await stat(file)).uid).toBe(process.getuid?.() ?? 0)
    })

    it('the download route never streams a host file', async () => {
      const server: TestServer = await startTestServer(store, { exec: { backend: 'sandbox', timeoutMs: 300_000 } })
      try {
        const alice = await server.createUser()
        const project = await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'Race' } })
        const conversation = await server.request('POST', `/api/projects/${project.body.id}/conversations`, {
          token: alice.token,
          body: {},
        })
        const swapper = await startSwapper(server.exec, conversation.body.id, swapperScript(hostDir, 'f.txt', 'benign'))
        const seen = new Set<number>()
        try {
          for (let index = 0; index < attempts; index++) {
            const answer = await fetch(`${server.url}/api/conversations/${conversation.body.id}/files/a/f.txt`, {
              headers: { authorization: `Bearer ${alice.token}` },
            })
            const body = await answer.text()
            seen.add(answer.status)
            expect(body).not.toContain(secret)
            expect(answer.status).toBeLessThan(500)
          }
        } finally {
          await swapper.stop()
        }
        expect(seen.has(200)).toBe(true)
      } finally {
        await server.close()
      }
      expect(await readFile(join(hostDir, 'f.txt'), 'utf8')).toBe(secret)
    })
  },
)
