import Fastify from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { handleError } from './error-handler.js'

// A full disk is the server's trouble, named as such: 507 storage_full, not a bare 500 internal.
describe('handleError and a full disk', () => {
  const app = Fastify()
  beforeAll(async () => {
    app.setErrorHandler(handleError)
    app.get('/enospc', async () => {
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
    })
    app.get('/postgres', async () => {
      throw Object.assign(new Error('could not extend file "base/5/16384": No space left on device'), { code: '53100' })
    })
    await app.ready()
  })
  afterAll(async () => {
    await app.close()
  })

  it('answers 507 storage_full for the file system’s ENOSPC and for the database’s disk_full', async () => {
    for (const url of ['/enospc', '/postgres']) {
      const answer = await app.inject({ method: 'GET', url })
      expect(answer.statusCode, url).toBe(507)
      expect(answer.headers['content-type'], url).toContain('application/problem+json')
      expect(answer.json(), url).toMatchObject({ status: 507, code: 'storage_full' })
      expect(answer.body, url).not.toContain('base/5')
    }
  })
})
