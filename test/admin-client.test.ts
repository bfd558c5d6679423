import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { httpUserAdmin } from '../src/app/admin-client.js'

// The CLI beside a running server goes through its admin API (docs/reference/cli.md): an answer that is
// not the list it asked for is said as the server said it, not read as a list.
describe('the CLI through a running server’s admin API', () => {
  let url: string
  const server = createServer((_request, response) => {
    const body = JSON.stringify({
      type: 'urn:plinth:problem:rate_limited',
      title: 'Too many requests',
      status: 429,
      code: 'rate_limited',
      detail: 'too many requests from this address; retry in 42 s',
    })
    response.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': '42' }).end(body)
  })
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())))

  it('a refused list (429) is an error with the server’s words', async () => {
    const admin = httpUserAdmin(url, 'admin-token')
    await expect(admin.listUsers()).rejects.toThrow('too many requests from this address; retry in 42 s')
    await expect(admin.listTokens('01JZZZZZZZZZZZZZZZZZ000001')).rejects.toThrow(/retry in 42 s/)
  })
})
