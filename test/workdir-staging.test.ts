import { randomUUID } from 'node:crypto'
import { mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { WorkDirectories } from '../src/exec/index.js'
import { waitFor } from './helpers/waits.js'

// An upload is staged beside its name and renamed into place once complete; a server killed mid-upload
// leaves the staging file, which the next start removes (docs/guides/sandbox.md).
describe('partial uploads a stopped server left', () => {
  let root: string
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'plinth-staging-'))
  })
  afterAll(async () => {
    await rm(root, { recursive: true, force: true })
  })

  it('are removed at start, but not an upload in flight, a name only like theirs, or a symlink', async () => {
    const workdirs = new WorkDirectories(root)
    const conversation = '01J0000000000000000000000A'
    await workdirs.write(conversation, 'data/kept.txt', 'kept')
    const dir = await workdirs.dir(conversation)
    const stale = [join(dir, `.plinth-upload-${randomUUID()}`), join(dir, 'data', `.plinth-upload-${randomUUID()}`)]
    for (const path of stale) await writeFile(path, 'half an upload')
    await writeFile(join(dir, '.plinth-upload-mine'), 'a program’s own file')
    await symlink('/etc/passwd', join(dir, `.plinth-upload-${randomUUID()}`))
    // An upload still arriving.
    const body = new PassThrough()
    body.write('the first bytes')
    const inFlight = workdirs.write(conversation, 'data/big.bin', body)
    // Its staging file beside the stale one.
    await waitFor(
      async () => (await readdir(join(dir, 'data'))).filter((name) => name.startsWith('.plinth-upload-')).length === 2,
    )

    expect(await workdirs.sweepStaging()).toBe(2)
    const names = [...(await readdir(dir)), ...(await readdir(join(dir, 'data')))]
    expect(names).toContain('.plinth-upload-mine')
    expect(names).toContain('kept.txt')
    expect(names.filter((name) => name.startsWith('.plinth-upload-') && name !== '.plinth-upload-mine')).toHaveLength(
      2, // the symlink and the upload in flight
    )
    body.end(' and the rest')
    expect(await inFlight).toMatchObject({ path: 'data/big.bin', size: 28 })
  })
})
