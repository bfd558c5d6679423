import { createHash, randomBytes } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { mkdtemp, readFile, readdir, rm, symlink, writeFile, mkdir } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PostgresFileStore, SharedWorkDirectories } from '../src/exec/index.js'
import { createConversation, deleteUnnamedWorkBlobs, type Store } from '../src/store/index.js'
import { testDb } from '../src/store/test-access.js'
import { openTestStore, testEngines } from './helpers/engines.js'
import { seedProject, type SeedScope } from './helpers/store-seed.js'

// Work directories shared through the database (docs/guides/scaling.md#files): two instances' caches
// over one store, in one process. The two-process tests are in files-multi-instance.test.ts.
const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined }

describe.each(testEngines())('work files shared through the store (%s)', (engine) => {
  let store: Store
  let scope: SeedScope
  const roots: string[] = []
  beforeAll(async () => {
    store = await openTestStore(engine)
    scope = await seedProject(store, 'files')
  })
  afterAll(async () => {
    await store?.close()
    for (const root of roots) await rm(root, { recursive: true, force: true })
  })

  const instance = async (root?: string): Promise<SharedWorkDirectories> => {
    const dir = root ?? (await mkdtemp(join(tmpdir(), 'plinth-shared-')))
    roots.push(dir)
    return new SharedWorkDirectories(join(dir, 'work'), new PostgresFileStore(store), quiet)
  }
  const conversation = async (): Promise<string> => (await store.transaction((tx) => createConversation(tx, scope))).id
  const text = async (dirs: SharedWorkDirectories, id: string, path: string): Promise<string> =>
    (await dirs.read(id, path, { limit: 64 * 1024 * 1024 })).bytes.toString()
  const blobs = async (): Promise<number> =>
    Number(
      (
        await testDb(store)
          .selectFrom('work_blobs')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    )

  it('a file written on one instance is read, replaced and deleted from the other', async () => {
    const [a, b] = [await instance(), await instance()]
    const id = await conversation()
    await a.write(id, 'notes/plan.md', 'first')
    expect(await text(b, id, 'notes/plan.md')).toBe('first')
    expect((await b.list(id)).map((entry) => entry.path)).toEqual(['notes', 'notes/plan.md'])
    await b.write(id, 'notes/plan.md', 'second, longer')
    expect(await text(a, id, 'notes/plan.md')).toBe('second, longer')
    await a.remove(id, 'notes')
    expect(await b.list(id)).toEqual([])
    // Gone from b's own disk too, not just hidden.
    expect(await readdir(await b.dir(id))).toEqual([])
  })

  it('what an execution wrote is stored after it: regular files only, in chunks, content stored once', async () => {
    const [a, b] = [await instance(), await instance()]
    const id = await conversation()
    const big = randomBytes(3 * 1024 * 1024 + 17)
    const before = await blobs()
    await a.beforeExec(id)
    const started = Date.now()
    // What a program does in its directory, behind the server's back.
    const dir = await a.dir(id)
    await mkdir(join(dir, 'out'))
    await writeFile(join(dir, 'out', 'big.bin'), big)
    await writeFile(join(dir, 'out', 'same-1.txt'), 'same content')
    await writeFile(join(dir, 'same-2.txt'), 'same content')
    await symlink('/etc/passwd', join(dir, 'link'))
    execFileSync('mkfifo', [join(dir, 'fifo')])
    await a.afterExec(id, started)
    expect(await blobs()).toBe(before + 2)
    const listed = (await b.list(id)).map((entry) => `${entry.type} ${entry.path}`)
    expect(listed).toEqual(['directory out', 'file out/big.bin', 'file out/same-1.txt', 'file same-2.txt'])
    const read = await b.read(id, 'out/big.bin', { limit: 8 * 1024 * 1024 })
    expect(createHash('sha256').update(read.bytes).digest('hex')).toBe(createHash('sha256').update(big).digest('hex'))
    // A program on b deletes one and changes another; a sees both.
    await b.beforeExec(id)
    const again = Date.now()
    await rm(join(await b.dir(id), 'same-2.txt'))
    await writeFile(join(await b.dir(id), 'out', 'same-1.txt'), 'changed')
    await b.afterExec(id, again)
    expect((await a.list(id)).map((entry) => entry.path)).toEqual(
      ['link', 'fifo', 'out', 'out/big.bin', 'out/same-1.txt'].sort(),
    )
    expect(await text(a, id, 'out/same-1.txt')).toBe('changed')
    // Content no file names any more is dropped with the change that dropped its last name.
    await a.remove(id, 'out')
    expect(await blobs()).toBe(before)
  })

  it('a restarted instance keeps what matches, fetches what changed and drops what was deleted elsewhere', async () => {
    const rootA = await mkdtemp(join(tmpdir(), 'plinth-shared-'))
    const a = await instance(rootA)
    const b = await instance()
    const id = await conversation()
    await a.write(id, 'keep.txt', 'kept')
    await a.write(id, 'gone.txt', 'to be deleted while a is down')
    await b.write(id, 'keep.txt', 'kept, changed while a was down')
    await b.remove(id, 'gone.txt')
    const restarted = await instance(rootA)
    expect((await restarted.list(id)).map((entry) => entry.path)).toEqual(['keep.txt'])
    expect(await readFile(join(await restarted.dir(id), 'keep.txt'), 'utf8')).toBe('kept, changed while a was down')
  })

  it('a file time out of the database’s range (a program can set one) is stored as the time of the change', async () => {
    const files = new PostgresFileStore(store)
    const id = await conversation()
    const hash = createHash('sha256').update('old file').digest('hex')
    expect(
      await files.putContent(hash, 8, async function* () {
        yield Buffer.from('old file')
      }),
    ).toBe(true)
    await files.commit(id, { put: [{ path: 'f', hash, size: 8, modifiedAt: -400_000_000_000_000 }], remove: [] })
    const stored = (await files.manifest(id)).files[0]!
    expect(Math.abs(stored.modifiedAt! - Date.now())).toBeLessThan(60_000)
  })

  it('content is stored only under its own hash (a file that changed while it was read is not)', async () => {
    const files = new PostgresFileStore(store)
    const hash = createHash('sha256').update('as hashed').digest('hex')
    const before = await blobs()
    const changed = async function* (): AsyncGenerator<Buffer> {
      yield Buffer.from('as stored')
    }
    expect(await files.putContent(hash, 9, changed)).toBe(false)
    expect(await blobs()).toBe(before)
    const same = async function* (): AsyncGenerator<Buffer> {
      yield Buffer.from('as hashed')
    }
    expect(await files.putContent(hash, 9, same)).toBe(true)
    expect(await blobs()).toBe(before + 1)
    // Stored and never named (an instance that died before its manifest change): swept after an hour.
    expect(await store.transaction((tx) => deleteUnnamedWorkBlobs(tx, 100))).toBe(0)
    await testDb(store)
      .updateTable('work_blobs')
      .set({ wanted_at: new Date(Date.now() - 2 * 3_600_000) })
      .execute()
    expect(await store.transaction((tx) => deleteUnnamedWorkBlobs(tx, 100))).toBe(1)
    expect(await blobs()).toBe(before)
  })

  it('files a directory held before it was shared are stored on first use', async () => {
    const root = await mkdtemp(join(tmpdir(), 'plinth-shared-'))
    const id = await conversation()
    await mkdir(join(root, 'work', id), { recursive: true })
    await writeFile(join(root, 'work', id, 'old.txt'), 'from before')
    const a = await instance(root)
    const b = await instance()
    expect((await a.list(id)).map((entry) => entry.path)).toEqual(['old.txt'])
    expect(await text(b, id, 'old.txt')).toBe('from before')
  })
})
