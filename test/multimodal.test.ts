import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AnthropicMessagesModel, OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { anthropicTextEvents, openaiTextChunks, startFakeUpstream, type FakeUpstream } from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Images in messages (docs/guides/agent-runs.md#images-in-messages): a run's input may be parts — text
// and images (a data URL, or a file of the conversation) — checked from their bytes, kept as files, and
// sent in each provider's own wire format; a model that declares no vision is refused.
const png = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAIAAAA2iEnWAAAAEklEQVR4nGP4z8DAwMDAwMAAAAQAAf/pMS8AAAAASUVORK5CYII=',
  'base64',
)
const jpeg = Buffer.from(
  '/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAP//////////////////////////////////////////////////////////////////////////////////////wgALCAABAAEBAREA/8QAFBABAAAAAAAAAAAAAAAAAAAAAP/aAAgBAQABPxA=',
  'base64',
)
const dataUrl = (type: string, bytes: Buffer) => `data:${type};base64,${bytes.toString('base64')}`

/** `png` made `size` bytes long by an ancillary (ignorable) chunk after its header. */
function bigPng(size: number): Buffer {
  const data = Buffer.alloc(size - png.length - 12, 0x61)
  const chunk = Buffer.alloc(data.length + 12)
  chunk.writeUInt32BE(data.length, 0)
  chunk.write('zzZz', 4, 'latin1')
  data.copy(chunk, 8)
  chunk.writeUInt32BE(crc32(chunk.subarray(4, 8 + data.length)), 8 + data.length)
  // After the signature (8 bytes) and IHDR (25 bytes).
  return Buffer.concat([png.subarray(0, 33), chunk, png.subarray(33)])
}

function crc32(bytes: Buffer): number {
  let crc = 0xffffffff
  for (const byte of bytes) {
    crc ^= byte
    for (let bit = 0; bit < 8; bit++) crc = (crc >>> 1) ^ (0xedb88320 & -(crc & 1))
  }
  return (crc ^ 0xffffffff) >>> 0
}

for (const engine of apiEngines()) {
  describe(`images in messages (${engine})`, () => {
    let store: Store
    let server: TestServer
    let openai: FakeUpstream
    let anthropic: FakeUpstream
    let alice: TestUser
    let projectId: string

    beforeAll(async () => {
      openai = await startFakeUpstream()
      anthropic = await startFakeUpstream()
      store = await openTestStore(engine)
      const common = { contextWindow: 100_000, supportsTools: true, idleTimeoutMs: 2_000 }
      server = await startTestServer(store, {
        models: [
          new OpenAIChatModel({
            id: 'gpt-vision',
            model: 'gpt-v',
            baseUrl: `${openai.url}/v1`,
            apiKey: 'sk-test-0123456789',
            capabilities: ['vision'],
            ...common,
          }),
          new AnthropicMessagesModel({
            id: 'claude-vision',
            model: 'claude-v',
            baseUrl: anthropic.url,
            apiKey: 'sk-ant-test-0123456789',
            capabilities: ['vision'],
            ...common,
          }),
          new OpenAIChatModel({ id: 'gpt-text', model: 'gpt-t', baseUrl: `${openai.url}/v1`, ...common }),
        ],
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'vision' } })).body
        .id
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await openai?.close()
      await anthropic?.close()
    })

    const conversation = async () =>
      (await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })).body
        .id as string
    const post = (conversationId: string, body: Record<string, unknown>) =>
      server.request('POST', `/api/conversations/${conversationId}/runs`, { token: alice.token, body })

    it('sends an inline image to an OpenAI-compatible model as an image_url part, and again in later rounds', async () => {
      const conversationId = await conversation()
      openai.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('A tiny image.', 2) })
      const created = await post(conversationId, {
        model: 'gpt-vision',
        input: [
          { type: 'text', text: 'What is this?' },
          { type: 'image', url: dataUrl('image/png', png) },
        ],
      })
      expect(created.status).toBe(201)
      expect((await waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])).status).toBe(
        'completed',
      )
      const sent = openai.requests.at(-1)!.body
      expect(sent.messages.at(-1)).toEqual({
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image_url', image_url: { url: dataUrl('image/png', png) } },
        ],
      })
      // The message keeps its parts; the image is a file of the conversation.
      const messages = await server.request('GET', `/api/conversations/${conversationId}/messages`, {
        token: alice.token,
      })
      const user = messages.body.items[0]
      expect(user).toMatchObject({ role: 'user', content: 'What is this?' })
      expect(user.parts).toEqual([
        { type: 'text', text: 'What is this?' },
        {
          type: 'image',
          path: expect.stringMatching(/^\.inputs\/[0-9a-f]{24}\.png$/),
          mediaType: 'image/png',
          width: 2,
          height: 3,
          bytes: png.length,
        },
      ])
      const file = await fetch(`${server.url}/api/conversations/${conversationId}/files/${user.parts[1].path}`, {
        headers: { authorization: `Bearer ${alice.token}` },
      })
      expect(Buffer.from(await file.arrayBuffer()).equals(png)).toBe(true)

      // The next run in the conversation still shows the model the image.
      openai.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Still tiny.', 1) })
      const next = await post(conversationId, { model: 'gpt-vision', input: 'And now?' })
      await waitForRun(server, alice.token, next.body.id as string, ['completed'])
      const again = openai.requests.at(-1)!.body.messages
      expect(again.find((message: { role: string; content: unknown }) => Array.isArray(message.content))).toEqual(
        sent.messages.at(-1),
      )
    })

    it('sends an uploaded file to an Anthropic model as a base64 image block', async () => {
      const conversationId = await conversation()
      const upload = await fetch(`${server.url}/api/conversations/${conversationId}/files/pics/photo.jpg`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'image/jpeg' },
        body: jpeg,
      })
      expect(upload.status).toBeLessThan(300)
      anthropic.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('A photo.', 2) })
      const created = await post(conversationId, {
        model: 'claude-vision',
        input: [
          { type: 'image', fileId: 'pics/photo.jpg' },
          { type: 'text', text: 'Describe it.' },
        ],
      })
      expect(created.status).toBe(201)
      await waitForRun(server, alice.token, created.body.id as string, ['completed'])
      expect(anthropic.requests.at(-1)!.body.messages).toEqual([
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: jpeg.toString('base64') } },
            { type: 'text', text: 'Describe it.' },
          ],
        },
      ])
    })

    it('refuses images a model cannot see, and images that are not what they say, with stable codes', async () => {
      const conversationId = await conversation()
      const image = { type: 'image', url: dataUrl('image/png', png) }
      const blind = await post(conversationId, { model: 'gpt-text', input: [{ type: 'text', text: 'see?' }, image] })
      expect(blind.status).toBe(400)
      expect(blind.body.code).toBe('model_lacks_capability')
      const cases: Array<[string, unknown[]]> = [
        ['declared png, bytes jpeg', [{ type: 'image', url: dataUrl('image/png', jpeg) }]],
        ['not an image', [{ type: 'image', url: dataUrl('image/png', Buffer.from('just some text, really')) }]],
        ['a remote URL', [{ type: 'image', url: 'https://example.com/cat.png' }]],
        ['both url and fileId', [{ type: 'image', url: dataUrl('image/png', png), fileId: 'x.png' }]],
        ['a missing file', [{ type: 'image', fileId: 'nowhere/none.png' }]],
        ['nine images', Array.from({ length: 9 }, () => image)],
      ]
      for (const [what, input] of cases) {
        const answer = await post(conversationId, { model: 'gpt-vision', input })
        expect(answer.status, what).toBe(400)
        expect(answer.headers.get('content-type'), what).toMatch(/^application\/problem\+json/)
        expect(answer.body.code, what).toBe('invalid_image')
      }
      // The image limit, not the request's: a 4 MiB image inline fits (base64 and all), a 5.5 MiB one is refused as an image.
      const large = await post(conversationId, {
        model: 'gpt-text',
        input: [{ type: 'image', url: dataUrl('image/png', bigPng(4 * 1024 * 1024)) }],
      })
      expect([large.status, large.body.code]).toEqual([400, 'model_lacks_capability'])
      const tooLarge = await post(conversationId, {
        model: 'gpt-vision',
        input: [{ type: 'image', url: dataUrl('image/png', bigPng(5.5 * 1024 * 1024)) }],
      })
      expect([tooLarge.status, tooLarge.body.code]).toEqual([400, 'invalid_image'])
      // A message of whitespace alone is not about images at all.
      const blank = await post(conversationId, { model: 'gpt-vision', input: [{ type: 'text', text: '   ' }] })
      expect([blank.status, blank.body.code]).toEqual([400, 'validation_failed'])
      // Nothing was created by the refusals.
      const runs = await server.request('GET', `/api/conversations/${conversationId}/runs`, { token: alice.token })
      expect(runs.body.items).toEqual([])
    })
  })
}
