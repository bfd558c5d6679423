import { readdir } from 'node:fs/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Store } from '../src/store/index.js'
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
    let projectId: string

    beforeAll(async () => {
      store = await openTestStore('pglite')
      server = await startTestServer(store, {
        exec: {
          backend,
          maxUploadBytes: 3 * mib,
          quota: { conversationBytes: 4 * mib, userBytes: 6 * mib, conversationFiles: 200 },
        },
        uploads: { perUser: 2, total: 8 },
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
