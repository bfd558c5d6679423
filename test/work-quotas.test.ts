import { execFileSync } from 'node:child_process'
import { request } from 'node:http'
import { access, mkdir, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
import { sql, testDb } from '../src/store/test-access.js'
import { openTestStore } from './helpers/engines.js'
import { sandboxAvailable } from './helpers/sandbox.js'
import { startTestServer, type Answer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitFor } from './helpers/waits.js'

const probe = await sandboxAvailable('work-directory quota suite (sandbox parts)')
const mib = 1024 * 1024

// Regression (docs/security.md#disk-quotas-and-uploads): no disk quota (569 MB written in 1.3 s), no
// delete route, uploads buffered whole.
describe.each<'direct' | 'sandbox'>(['direct', ...(probe.ok ? (['sandbox'] as const) : [])])(
  'work-directory quotas and uploads (%s)',
  (backend) => {
    let store: Store
    let server: TestServer
    let alice: TestUser

    beforeAll(async () => {
      store = await openTestStore('pglite')
      server = await startTestServer(store, {
        exec: {
          backend,
          maxUploadBytes: 3 * mib,
          quota: { conversationBytes: 4 * mib, userBytes: 6 * mib, conversationFiles: 200, projectBytes: 5.5 * mib },
          // The files every instance shares (on the embedded engine here): quotas hold the same.
          fileStore: 'postgres',
        },
        uploads: { perUser: 2, total: 8 },
      })
      alice = await server.createUser()
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
    })

    /** A conversation in a project of its own (the project quota is tested on its own below). */
    const newConversation = async (): Promise<string> => {
      const projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'quota' } }))
        .body.id
      const id = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      await server.request('PATCH', `/api/conversations/${id}`, {
        token: alice.token,
        body: { permissionMode: 'risky' },
      })
      return id
    }
    const put = (
      conversation: string,
      path: string,
      bytes: Buffer | ReadableStream<Uint8Array>,
      headers: Record<string, string> = {},
    ) =>
      fetch(`${server.url}/api/conversations/${conversation}/files/${path}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'application/octet-stream', ...headers },
        body: bytes,
        ...(!(bytes instanceof Buffer) && { duplex: 'half' }),
      } as RequestInit)
    /** `put` as another user. */
    const putAs = (user: TestUser, conversation: string, path: string, bytes: Buffer) =>
      fetch(`${server.url}/api/conversations/${conversation}/files/${path}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${user.token}` },
        body: bytes,
      })
    /** Runs a shell line, approving it when the backend asks (direct always asks). */
    const exec = async (conversation: string, command: string): Promise<Answer> => {
      const asked = await server.request('POST', '/api/commands/core.exec', {
        token: alice.token,
        body: { entrance: 'button', conversationId: conversation, params: { command } },
      })
      if (asked.status !== 202) return asked
      const decided = await server.request('POST', `/api/decisions/${asked.body.decision.id}`, {
        token: alice.token,
        body: { decision: 'approve' },
      })
      return {
        status: decided.body.dispatch.status === 'succeeded' ? 200 : 507,
        headers: decided.headers,
        body: decided.body.dispatch,
      }
    }
    const names = async (conversation: string): Promise<string[]> =>
      (await readdir(await server.exec.workdirs.dir(conversation))).sort()
    /** What the directory holds on disk, however deep (as `du` counts apparent sizes). */
    const diskBytes = async (conversation: string): Promise<number> =>
      Number(
        execFileSync('du', ['-sb', await server.exec.workdirs.dir(conversation)], { encoding: 'utf8' }).split('\t')[0],
      )

    it('an execution that writes past the quota fails quota_exceeded, and what it wrote is removed', async () => {
      const conversation = await newConversation()
      const small = await exec(conversation, 'head -c 100000 /dev/zero > keep.bin')
      expect(small.status).toBe(200)
      const flood = await exec(
        conversation,
        'for i in 1 2 3 4 5 6 7 8; do head -c 1000000 /dev/zero > big$i.bin; done; echo done',
      )
      expect(flood.status).toBe(507)
      expect(JSON.stringify(flood.body)).toMatch(/quota/)
      expect(await names(conversation)).toEqual(expect.arrayContaining(['keep.bin']))
      const left = await server.exec.workdirs.measure(conversation, { maxFiles: 1000 })
      expect(left.bytes).toBeLessThanOrEqual(4 * mib)
      // Too many files counts too.
      const files = await exec(conversation, 'for i in $(seq 1 400); do : > n$i; done')
      expect(files.status).toBe(507)
      expect((await server.exec.workdirs.measure(conversation, { maxFiles: 1000 })).files).toBeLessThanOrEqual(200)
    })

    it('a program cannot hide what it wrote: backdated files and trees nested past 32 levels go too', async () => {
      alice = await server.createUser()
      // Modification times are the program's to set; the inode's change time is not.
      const backdated = await newConversation()
      const old = await exec(
        backdated,
        'for i in 1 2 3 4 5 6; do head -c 1000000 /dev/zero > old$i.bin; touch -d 2001-01-01 old$i.bin; done',
      )
      expect(old.status).toBe(507)
      expect(await diskBytes(backdated)).toBeLessThanOrEqual(4 * mib)
      // Deeper than the server walks: never measured, so never counted — it goes whatever its size.
      alice = await server.createUser()
      const deep = await newConversation()
      const nested = 'd=$(printf "d/%.0s" $(seq 1 40)); mkdir -p $d'
      const hidden = await exec(deep, `${nested}; head -c 5000000 /dev/zero > $d/big.bin`)
      expect(hidden.status).toBe(507)
      expect(JSON.stringify(hidden.body)).toMatch(/deeper than 32/)
      expect(await diskBytes(deep)).toBeLessThan(mib)
      expect(await names(deep)).toEqual(['d'])
      // A deep tree is deleted through the files API too (one a program left before this rule).
      const made = await exec(deep, `${nested}; echo kept`)
      expect(made.status).toBe(507)
      await mkdir(join(await server.exec.workdirs.dir(deep), ...Array.from({ length: 40 }, () => 'e')), {
        recursive: true,
      })
      const deleted = await server.request('DELETE', `/api/conversations/${deep}/files/e`, { token: alice.token })
      expect(deleted.status).toBe(204)
      expect(await names(deep)).not.toContain('e')
    })

    it('a file uploaded just before an execution that goes over is not taken for the program’s', async () => {
      alice = await server.createUser()
      const conversation = await newConversation()
      // Uploaded, then at once a program that makes too many entries: only the program's go.
      expect((await put(conversation, 'input.bin', Buffer.alloc(300_000))).status).toBe(201)
      const flood = await exec(conversation, 'mkdir m && cd m && seq 1 250 | xargs touch')
      expect(flood.status).toBe(507)
      expect(JSON.stringify(flood.body)).not.toMatch(/input\.bin/)
      expect(await names(conversation)).toContain('input.bin')
      expect((await server.exec.workdirs.measure(conversation, { maxFiles: 1000 })).files).toBeLessThanOrEqual(200)
      // The same for bytes: the upload stays, the program's big file goes.
      const other = await newConversation()
      expect((await put(other, 'second.bin', Buffer.alloc(1 * mib))).status).toBe(201)
      const big = await exec(other, 'head -c 5000000 /dev/zero > big.bin')
      expect(big.status).toBe(507)
      expect(await names(other)).toEqual(['second.bin'])
    })

    it('replacing a file near the quota counts what it replaces (upload and write_file)', async () => {
      alice = await server.createUser()
      const conversation = await newConversation()
      expect((await put(conversation, 'a.bin', Buffer.alloc(1.5 * mib))).status).toBe(201)
      expect((await put(conversation, 'b.bin', Buffer.alloc(2 * mib))).status).toBe(201)
      // 3.5 of 4 MiB: a new 1 MiB file does not fit, a 1 MiB file in a.bin's place does.
      const added = await put(conversation, 'c.bin', Buffer.alloc(1 * mib))
      expect(added.status).toBe(507)
      // `dir/` names a directory: no file is written in its place.
      const slash = await put(conversation, 'dir/', Buffer.from('x'))
      expect(slash.status).toBe(400)
      expect(await names(conversation)).not.toContain('dir')
      expect((await put(conversation, 'a.bin', Buffer.alloc(1 * mib))).status).toBe(201)
      const written = await server.request('POST', '/api/commands/core.write_file', {
        token: alice.token,
        body: { entrance: 'button', conversationId: conversation, params: { path: 'b.bin', content: 'small now' } },
      })
      const dispatch =
        written.status === 202
          ? (
              await server.request('POST', `/api/decisions/${written.body.decision.id}`, {
                token: alice.token,
                body: { decision: 'approve' },
              })
            ).body.dispatch
          : written.body
      expect(dispatch.status).toBe('succeeded')
      expect((await put(conversation, 'c.bin', Buffer.alloc(1 * mib))).status).toBe(201)
    })

    it('uploads: 413 past the size limit, 507 past the quota, nothing half-written left; DELETE frees room', async () => {
      // A user of its own from here on: what the execution test left (up to its 4 MiB, depending on how
      // far the flood got) must not decide whether this user's 6 MiB still fits 2.5 MiB.
      alice = await server.createUser()
      const conversation = await newConversation()
      // Without Content-Length (chunked), the limit holds while streaming.
      const chunked = await put(conversation, 'stream.bin', new Blob([Buffer.alloc(3 * mib + 10)]).stream())
      expect(chunked.status).toBe(413)
      expect((await put(conversation, 'a.bin', Buffer.alloc(2 * mib))).status).toBe(201)
      const tooBig = await put(conversation, 'huge.bin', Buffer.alloc(3 * mib + 1))
      expect([tooBig.status, ((await tooBig.json()) as { code: string }).code]).toEqual([413, 'payload_too_large'])
      const over = await put(conversation, 'b.bin', Buffer.alloc(2.5 * mib))
      expect([over.status, ((await over.json()) as { code: string }).code]).toEqual([507, 'quota_exceeded'])
      expect(await names(conversation)).toEqual(['a.bin'])
      const deleted = await server.request('DELETE', `/api/conversations/${conversation}/files/a.bin`, {
        token: alice.token,
      })
      expect(deleted.status).toBe(204)
      expect((await put(conversation, 'dir/b.bin', Buffer.alloc(2.5 * mib))).status).toBe(201)
      expect(
        (await server.request('DELETE', `/api/conversations/${conversation}/files/dir`, { token: alice.token })).status,
      ).toBe(204)
      expect(await names(conversation)).toEqual([])
      expect(
        (await server.request('DELETE', `/api/conversations/${conversation}/files/dir`, { token: alice.token })).status,
      ).toBe(404)
      // `…/files/` is the listing (GET): no DELETE there.
      expect([400, 404, 405]).toContain(
        (await server.request('DELETE', `/api/conversations/${conversation}/files/`, { token: alice.token })).status,
      )
    })

    it('concurrent uploads cannot share the same room; a body of unknown length gets what is left', async () => {
      alice = await server.createUser()
      const conversation = await newConversation()
      expect((await put(conversation, 'a.bin', Buffer.alloc(2 * mib))).status).toBe(201)
      // 2 MiB left of 4: each 1.5 MiB upload fits alone, not both.
      const both = await Promise.all(['x.bin', 'y.bin'].map((name) => put(conversation, name, Buffer.alloc(1.5 * mib))))
      expect(both.map((answer) => answer.status).sort()).toEqual([201, 507])
      const listed = await server.exec.workdirs.measure(conversation, { maxFiles: 100 })
      expect(listed.bytes).toBe(3.5 * mib)
      // Chunked, 1 MiB with 0.5 MiB left: 507 (not the 413 of the upload limit), nothing left behind.
      const chunked = await put(conversation, 'z.bin', new Blob([Buffer.alloc(mib)]).stream())
      expect([chunked.status, ((await chunked.json()) as { code: string }).code]).toEqual([507, 'quota_exceeded'])
      expect((await names(conversation)).sort()).toEqual(['a.bin', expect.stringMatching(/^[xy]\.bin$/)])
      // What was refused was given back: 0.5 MiB still fits, chunked too.
      expect((await put(conversation, 'w.bin', new Blob([Buffer.alloc(mib / 2)]).stream())).status).toBe(201)
    })

    it('a replacement frees its old file’s room only once written; an execution meanwhile keeps the count', async () => {
      alice = await server.createUser()
      const conversation = await newConversation()
      const projectId = (await server.request('GET', `/api/conversations/${conversation}`, { token: alice.token })).body
        .projectId
      const other = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id
      const dir = await server.exec.workdirs.dir(conversation)
      expect((await put(conversation, 'a.bin', Buffer.alloc(3 * mib))).status).toBe(201)
      // Replacing a.bin by 1 MiB, declared and sent slowly: until it lands a.bin still holds 3 MiB.
      const slow = request(new URL(`${server.url}/api/conversations/${conversation}/files/a.bin`), {
        method: 'PUT',
        headers: { authorization: `Bearer ${alice.token}`, 'content-length': String(mib) },
      })
      const answered = new Promise<number>((resolve, reject) => {
        slow.on('response', (response) => {
          response.resume()
          resolve(response.statusCode ?? 0)
        })
        slow.on('error', reject)
      })
      slow.write(Buffer.alloc(mib / 2))
      // Its bytes are arriving (the staging file is there): its room was counted before.
      await waitFor(async () => (await readdir(dir)).some((name) => name.startsWith('.plinth-upload-')))
      // The project holds 3 MiB of its 5.5 until then: 2.75 more in another conversation do not fit.
      const meanwhile = await put(other, 'b.bin', Buffer.alloc(2.75 * mib))
      expect(meanwhile.status).toBe(507)
      // An execution ending now measures the directory: that must not drop what the upload has counted.
      await server.exec.quota.settleAfterExec(conversation, alice.user.id, Date.now())
      slow.end(Buffer.alloc(mib / 2))
      expect(await answered).toBe(201)
      const usage = await testDb(store)
        .selectFrom('work_usage')
        .select('bytes')
        .where('conversation_id', '=', conversation)
        .executeTakeFirstOrThrow()
      // At least the new file (the measurement also saw the upload's partial staging file: counted until
      // the next one, which errs on the safe side), never less.
      expect(Number(usage.bytes)).toBeGreaterThanOrEqual(mib)
      expect(Number(usage.bytes)).toBeLessThanOrEqual(1.5 * mib)
    })

    it('a user’s work directories share one quota', async () => {
      const bob = await server.createUser()
      const conversationOf = async (): Promise<string> =>
        (await server.request('POST', `/api/projects/${bobProject}/conversations`, { token: bob.token, body: {} })).body
          .id
      const bobProject = (await server.request('POST', '/api/projects', { token: bob.token, body: { name: 'bob' } }))
        .body.id
      const first = await conversationOf()
      const second = await conversationOf()
      expect((await putAs(bob, first, 'x.bin', Buffer.alloc(3 * mib))).status).toBe(201)
      expect((await putAs(bob, second, 'y.bin', Buffer.alloc(2 * mib))).status).toBe(201)
      // 5 MiB in two conversations: another 2 MiB in a third would pass the user's 6 MiB.
      const third = await conversationOf()
      const refused = await putAs(bob, third, 'z.bin', Buffer.alloc(2 * mib))
      expect(refused.status).toBe(507)
      expect(((await refused.json()) as { detail: string }).detail).toMatch(/your work directories/)
      expect((await putAs(bob, third, 'z.bin', Buffer.alloc(mib / 2))).status).toBe(201)
    })

    it('a project’s work directories share one quota', async () => {
      const carol = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: carol.token, body: { name: 'c' } })).body
        .id
      const conversationOf = async (): Promise<string> =>
        (await server.request('POST', `/api/projects/${project}/conversations`, { token: carol.token, body: {} })).body
          .id
      expect((await putAs(carol, await conversationOf(), 'x.bin', Buffer.alloc(3 * mib))).status).toBe(201)
      // 6 MiB would fit carol's 6 MiB, not the project's 5.5.
      const refused = await putAs(carol, await conversationOf(), 'y.bin', Buffer.alloc(3 * mib))
      expect(refused.status).toBe(507)
      const body = (await refused.json()) as { code: string; detail: string }
      expect([body.code, body.detail]).toEqual(['quota_exceeded', expect.stringMatching(/project's work directories/)])
    })

    it('deleting a conversation, or its project, gives its files’ room back at once', async () => {
      const dave = await server.createUser()
      const projectOf = async (): Promise<string> =>
        (await server.request('POST', '/api/projects', { token: dave.token, body: { name: 'd' } })).body.id
      const conversationIn = async (project: string): Promise<string> =>
        (await server.request('POST', `/api/projects/${project}/conversations`, { token: dave.token, body: {} })).body
          .id
      const secondProject = await projectOf()
      const first = await conversationIn(await projectOf())
      const second = await conversationIn(secondProject)
      const third = await conversationIn(await projectOf())
      expect((await putAs(dave, first, 'x.bin', Buffer.alloc(3 * mib))).status).toBe(201)
      expect((await putAs(dave, second, 'y.bin', Buffer.alloc(2.5 * mib))).status).toBe(201)
      // 5.5 MiB: another MiB would pass dave's 6.
      expect((await putAs(dave, third, 'z.bin', Buffer.alloc(mib))).status).toBe(507)
      const firstDir = await server.exec.workdirs.dir(first)
      expect((await server.request('DELETE', `/api/conversations/${first}`, { token: dave.token })).status).toBe(204)
      expect((await putAs(dave, third, 'z.bin', Buffer.alloc(mib))).status).toBe(201)
      await expect(access(firstDir)).rejects.toMatchObject({ code: 'ENOENT' })
      // 3.5 MiB: 2.6 more would pass the 6 MiB, until the second conversation's project goes.
      expect((await putAs(dave, third, 'more.bin', Buffer.alloc(2.6 * mib))).status).toBe(507)
      expect((await server.request('DELETE', `/api/projects/${secondProject}`, { token: dave.token })).status).toBe(204)
      expect((await putAs(dave, third, 'more.bin', Buffer.alloc(2.6 * mib))).status).toBe(201)
    })

    it('a deleted conversation’s files written after its deletion (a late execution) go at the next sweep', async () => {
      const erin = await server.createUser()
      const project = (await server.request('POST', '/api/projects', { token: erin.token, body: { name: 'e' } })).body
        .id
      const conversation = (
        await server.request('POST', `/api/projects/${project}/conversations`, { token: erin.token, body: {} })
      ).body.id
      expect((await server.request('DELETE', `/api/conversations/${conversation}`, { token: erin.token })).status).toBe(
        204,
      )
      // What an execution still finishing on another instance records after the deletion.
      await sql`insert into work_usage (conversation_id, owner_id, bytes, files)
                values (${conversation}, ${erin.user.id}, ${5 * mib}, 1)`.execute(testDb(store))
      expect((await server.runs.sweepRetention()).deletedConversationFiles).toBe(1)
      expect(
        await sql`select 1 from work_usage where conversation_id = ${conversation}`.execute(testDb(store)),
      ).toEqual(expect.objectContaining({ rows: [] }))
    })

    it('at most two uploads per user at once: the third is 429 too_many_uploads with Retry-After', async () => {
      alice = await server.createUser()
      const conversation = await newConversation()
      const releases: Array<() => void> = []
      const slow = () =>
        new ReadableStream<Uint8Array>({
          async start(controller) {
            controller.enqueue(new Uint8Array(1024))
            await new Promise<void>((resolve) => releases.push(resolve))
            controller.close()
          },
        })
      const first = put(conversation, 'one.bin', slow())
      const second = put(conversation, 'two.bin', slow())
      // Wait until both are in flight (their first chunk has arrived), then a third.
      await waitFor(() => releases.length >= 2, { what: 'both uploads in flight' })
      let third: Response | undefined
      await waitFor(
        async () => {
          third = await put(conversation, 'three.bin', Buffer.alloc(10))
          return third.status === 429
        },
        { what: 'the third upload to be refused' },
      ).catch(() => undefined)
      expect(third!.status).toBe(429)
      expect(third!.headers.get('retry-after')).toBe('1')
      expect(((await third!.json()) as { code: string }).code).toBe('too_many_uploads')
      for (const release of releases) release()
      expect((await first).status).toBe(201)
      expect((await second).status).toBe(201)
      expect((await put(conversation, 'four.bin', Buffer.alloc(10))).status).toBe(201)
    })
  },
)
