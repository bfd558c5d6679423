import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AnthropicMessagesModel, OpenAIChatModel } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { makeDocx, makePdf } from './helpers/documents.js'
import { apiEngines, openTestStore } from './helpers/engines.js'
import { anthropicTextEvents, openaiTextChunks, startFakeUpstream, type FakeUpstream } from './helpers/fake-upstream.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'
import { waitForRun } from './helpers/waits.js'

// Documents in messages (docs/guides/agent-runs.md#files-in-messages): a `file` part names a document of
// the conversation or a knowledge item; a PDF goes natively to a model that declares `pdf` (OpenAI `file`
// part, Anthropic `document` block), every other model and document is sent as its extracted text.
for (const engine of apiEngines()) {
  describe(`documents in messages (${engine})`, () => {
    let store: Store
    let server: TestServer
    let openai: FakeUpstream
    let anthropic: FakeUpstream
    let alice: TestUser
    let projectId: string
    let pdf: Buffer

    beforeAll(async () => {
      openai = await startFakeUpstream()
      anthropic = await startFakeUpstream()
      store = await openTestStore(engine)
      const common = { contextWindow: 100_000, supportsTools: true, idleTimeoutMs: 2_000 }
      server = await startTestServer(store, {
        models: [
          new OpenAIChatModel({
            id: 'gpt-pdf',
            model: 'gpt-p',
            baseUrl: `${openai.url}/v1`,
            apiKey: 'sk-test-0123456789',
            capabilities: ['pdf'],
            ...common,
          }),
          new AnthropicMessagesModel({
            id: 'claude-pdf',
            model: 'claude-p',
            baseUrl: anthropic.url,
            apiKey: 'sk-ant-test-0123456789',
            capabilities: ['pdf'],
            ...common,
          }),
          new OpenAIChatModel({ id: 'gpt-text', model: 'gpt-t', baseUrl: `${openai.url}/v1`, ...common }),
        ],
      })
      alice = await server.createUser()
      projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'docs' } })).body
        .id
      pdf = await makePdf(['Quarterly revenue rose to 42 million.', 'Churn fell to 3 percent.'])
    })
    afterAll(async () => {
      await server?.close()
      await store?.close()
      await openai?.close()
      await anthropic?.close()
    })

    const conversationWith = async (files: Record<string, Buffer>) => {
      const id = (
        await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
      ).body.id as string
      for (const [path, bytes] of Object.entries(files)) await server.exec.workdirs.write(id, path, bytes)
      return id
    }
    const run = async (conversationId: string, body: Record<string, unknown>) => {
      const created = await server.request('POST', `/api/conversations/${conversationId}/runs`, {
        token: alice.token,
        body,
      })
      expect(created.status, JSON.stringify(created.body)).toBe(201)
      const done = await waitForRun(server, alice.token, created.body.id as string, ['completed', 'failed'])
      expect(done.status).toBe('completed')
      return done
    }

    it('sends a PDF natively to an OpenAI-compatible model that reads PDFs, as a file part', async () => {
      const id = await conversationWith({ 'reports/q3.pdf': pdf })
      openai.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Revenue rose.', 2) })
      await run(id, {
        model: 'gpt-pdf',
        input: [
          { type: 'text', text: 'Summarise this report.' },
          { type: 'file', fileId: 'reports/q3.pdf' },
        ],
      })
      expect(openai.requests.at(-1)!.body.messages.at(-1)).toEqual({
        role: 'user',
        content: [
          { type: 'text', text: 'Summarise this report.' },
          {
            type: 'file',
            file: { filename: 'q3.pdf', file_data: `data:application/pdf;base64,${pdf.toString('base64')}` },
          },
        ],
      })
      // Stored with the message: the file, its type and size (the extracted text kept for text-only models).
      const messages = await server.request('GET', `/api/conversations/${id}/messages`, { token: alice.token })
      const user = messages.body.items.find((message: { role: string }) => message.role === 'user')
      expect(user.parts[1]).toMatchObject({
        type: 'file',
        path: 'reports/q3.pdf',
        filename: 'q3.pdf',
        mediaType: 'application/pdf',
        bytes: pdf.length,
        text: expect.stringMatching(/Quarterly revenue rose to 42 million/),
      })
    })

    it('sends the PDF as a document block to an Anthropic model that reads PDFs', async () => {
      const id = await conversationWith({ 'q3.pdf': pdf })
      anthropic.enqueue({ kind: 'anthropic-stream', events: anthropicTextEvents('Revenue rose.', 2) })
      await run(id, {
        model: 'claude-pdf',
        input: [
          { type: 'file', fileId: 'q3.pdf' },
          { type: 'text', text: 'Sum up.' },
        ],
      })
      expect(anthropic.requests.at(-1)!.body.messages.at(-1)).toEqual({
        role: 'user',
        content: [
          {
            type: 'document',
            source: { type: 'base64', media_type: 'application/pdf', data: pdf.toString('base64') },
            title: 'q3.pdf',
          },
          { type: 'text', text: 'Sum up.' },
        ],
      })
    })

    it('sends extracted text to a model without pdf, and for other documents and knowledge items', async () => {
      const docx = await makeDocx('Roadmap', ['Ship the search in May.'])
      const id = await conversationWith({ 'q3.pdf': pdf, 'roadmap.docx': docx })
      const item = await server.request('POST', `/api/projects/${projectId}/knowledge`, {
        token: alice.token,
        body: { title: 'Pricing', text: 'The team plan costs 12 euros a seat.' },
      })
      expect(item.status).toBe(201)
      openai.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Noted.', 2) })
      await run(id, {
        model: 'gpt-text',
        input: [
          { type: 'text', text: 'Compare these.' },
          { type: 'file', fileId: 'q3.pdf' },
          { type: 'file', fileId: 'roadmap.docx' },
          { type: 'file', knowledgeId: item.body.id },
        ],
      })
      const content = openai.requests.at(-1)!.body.messages.at(-1).content as Array<{ type: string; text: string }>
      expect(content.map((part) => part.type)).toEqual(['text', 'text', 'text', 'text'])
      expect(content[1]!.text).toMatch(
        /^<document name="q3\.pdf">\n[\s\S]*Quarterly revenue rose to 42 million[\s\S]*<\/document>$/,
      )
      expect(content[2]!.text).toMatch(/^<document name="roadmap\.docx">[\s\S]*Ship the search in May/)
      expect(content[3]!.text).toMatch(/^<document name="Pricing">[\s\S]*12 euros a seat/)
    })

    it('refuses documents it cannot use with invalid_file', async () => {
      const id = await conversationWith({
        'fake.pdf': Buffer.from('not a pdf at all'),
        'tool.exe': Buffer.from('MZ'),
        'huge.txt': Buffer.alloc(10 * 1024 * 1024 + 1, 'a'),
      })
      const other = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'other' } }))
        .body.id
      const elsewhere = await server.request('POST', `/api/projects/${other}/knowledge`, {
        token: alice.token,
        body: { title: 'Elsewhere', text: 'Another project.' },
      })
      const bad = async (part: Record<string, unknown>) => {
        const answer = await server.request('POST', `/api/conversations/${id}/runs`, {
          token: alice.token,
          body: {
            model: 'gpt-text',
            input: [
              { type: 'text', text: 'Read it.' },
              { type: 'file', ...part },
            ],
          },
        })
        return [answer.status, answer.body.code, answer.body.detail]
      }
      expect(await bad({ fileId: 'fake.pdf' })).toEqual([400, 'invalid_file', expect.stringMatching(/not one/)])
      expect(await bad({ fileId: 'tool.exe' })).toEqual([400, 'invalid_file', expect.stringMatching(/not a document/)])
      expect(await bad({ fileId: 'huge.txt' })).toEqual([400, 'invalid_file', expect.stringMatching(/over the/)])
      expect(await bad({ fileId: 'missing.pdf' })).toEqual([400, 'invalid_file', expect.any(String)])
      expect(await bad({ fileId: 'fake.pdf', knowledgeId: elsewhere.body.id })).toEqual([
        400,
        'invalid_file',
        expect.stringMatching(/exactly one/),
      ])
      expect(await bad({ knowledgeId: elsewhere.body.id })).toEqual([400, 'invalid_file', expect.any(String)])
      // An id of another shape is malformed, as every body id.
      expect((await bad({ knowledgeId: 'nope' })).slice(0, 2)).toEqual([400, 'validation_failed'])
    })
  })
}
