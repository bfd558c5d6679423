import { existsSync } from 'node:fs'
import { mkdtemp, readFile } from 'node:fs/promises'
import { createServer, type Server } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import { chromium, type Browser, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ScriptedModel, type LanguageModel, type ModelRequest, type StreamPart } from '../src/llm/index.js'
import type { Store } from '../src/store/index.js'
import { openTestStore, apiEngines } from './helpers/engines.js'
import { startTestServer, type TestServer, type TestUser } from './helpers/test-server.js'

// A real page built on @ai-sdk/react's useChat (test/__fixtures__/use-chat-page, wired as
// docs/ui-stream.md shows), bundled here with esbuild, served from its own origin and driven in Chromium
// against a Plinth that allows that origin (CORS), as a frontend of one's own would be.
const executablePath =
  process.env.PLINTH_CHROMIUM ??
  ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((path) => existsSync(path))
if (!executablePath && process.env.REQUIRE_BROWSER === '1')
  throw new Error('REQUIRE_BROWSER=1 but no Chromium is installed (apt-get install chromium)')
if (!executablePath)
  console.warn('[plinth tests] skipping the useChat browser tests: no Chromium (apt-get install chromium)')

const pageDir = fileURLToPath(new URL('./__fixtures__/use-chat-page/', import.meta.url))
const halfAnswer = 'Counting slowly: one, two, three, '
const wholeAnswer = `${halfAnswer}four, five, six. Done counting.`

/** A model that streams the first half of its answer, then waits until the test opens the gate. */
class GatedModel implements LanguageModel {
  readonly id = 'gated'
  readonly provider = 'scripted' as const
  readonly supportsTools = true
  readonly contextWindow = 32_000
  #open: () => void = () => undefined
  #gate = this.#closed()

  #closed(): Promise<void> {
    return new Promise((resolve) => (this.#open = resolve))
  }
  open(): void {
    this.#open()
  }
  async *stream(request: ModelRequest): AsyncGenerator<StreamPart> {
    const gate = this.#gate
    for (const piece of halfAnswer.match(/\S+\s*/g) ?? []) yield { type: 'text-delta', text: piece }
    // The server stopping aborts the run: it must not wait for a gate a failed test never opens.
    await new Promise<void>((resolve) => {
      void gate.then(resolve)
      request.signal?.addEventListener('abort', () => resolve(), { once: true })
    })
    if (request.signal?.aborted) return
    for (const piece of wholeAnswer.slice(halfAnswer.length).match(/\S+\s*/g) ?? [])
      yield { type: 'text-delta', text: piece }
    yield { type: 'usage', usage: { inputTokens: 10, outputTokens: 10 } }
    yield { type: 'finish', reason: 'stop' }
  }
}

/** The page's HTML and its bundle (React, useChat, the AI SDK) from a server of its own on loopback. */
async function servePage(): Promise<{ origin: string; server: Server }> {
  const bundled = await build({
    entryPoints: [join(pageDir, 'app.tsx')],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    jsx: 'automatic',
    define: { 'process.env.NODE_ENV': '"production"' },
    write: false,
    logLevel: 'silent',
  })
  const files: Record<string, { type: string; body: string | Uint8Array }> = {
    '/': { type: 'text/html; charset=utf-8', body: await readFile(join(pageDir, 'index.html'), 'utf8') },
    '/app.js': { type: 'text/javascript; charset=utf-8', body: bundled.outputFiles[0]!.contents },
  }
  const server = createServer((request, response) => {
    const file = files[new URL(request.url ?? '/', 'http://page').pathname]
    if (!file) return response.writeHead(404).end()
    response.writeHead(200, { 'content-type': file.type, 'cache-control': 'no-store' }).end(file.body)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { origin: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server }
}

// Each case waits on a browser with generous deadlines (45 s a step) on a busy 2-core machine.
describe.skipIf(!executablePath)('useChat in Chromium', { timeout: 120_000 }, () => {
  let browser: Browser
  let page: { origin: string; server: Server }
  let screenshots: string

  beforeAll(async () => {
    page = await servePage()
    screenshots = process.env.PLINTH_SCREENSHOTS ?? (await mkdtemp(join(tmpdir(), 'plinth-usechat-')))
    console.log(`[plinth tests] useChat screenshots: ${screenshots}`)
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-dev-shm-usage'] })
  }, 120_000)
  afterAll(async () => {
    await browser?.close()
    await new Promise((resolve) => page?.server.close(resolve))
  })

  for (const engine of apiEngines()) {
    describe(`on ${engine}`, () => {
      let store: Store
      let server: TestServer
      let model: ScriptedModel
      let gated: GatedModel
      let alice: TestUser
      let projectId: string

      beforeAll(async () => {
        store = await openTestStore(engine)
        model = new ScriptedModel({ id: 'scripted', turns: [] })
        gated = new GatedModel()
        server = await startTestServer(store, { models: [model, gated], plugins: ['rdm'], corsOrigins: [page.origin] })
        alice = await server.createUser()
        projectId = (await server.request('POST', '/api/projects', { token: alice.token, body: { name: 'useChat' } }))
          .body.id
      })
      afterAll(async () => {
        await server?.close()
        await store?.close()
      })

      /** A new conversation and the page open on it, signed in with alice's token. */
      async function openChat(options: { model?: string } = {}): Promise<{ tab: Page; conversationId: string }> {
        const conversationId = (
          await server.request('POST', `/api/projects/${projectId}/conversations`, { token: alice.token, body: {} })
        ).body.id as string
        const tab = await browser.newPage({ viewport: { width: 900, height: 760 } })
        tab.setDefaultTimeout(45_000)
        tab.on('pageerror', (error) => console.warn('[useChat page error]', error.message))
        const query = new URLSearchParams({
          conversation: conversationId,
          api: server.url,
          ...(options.model && { model: options.model }),
        })
        await tab.goto(`${page.origin}/?${query}#token=${encodeURIComponent(alice.token)}`)
        await tab.locator('[data-testid=chat][data-status=ready]').waitFor()
        return { tab, conversationId }
      }
      const send = async (tab: Page, text: string): Promise<void> => {
        await tab.fill('[data-testid=input]', text)
        await tab.click('[data-testid=send]')
      }
      /** Waits until the assistant messages show exactly `texts` (and, if given, useChat's status is `status`). */
      const showing = async (tab: Page, texts: string[], status?: string): Promise<void> => {
        const chat = await tab.locator('[data-testid=chat]').elementHandle()
        await tab.waitForFunction(
          ({ chat, texts, status }) => {
            const shown = [...chat.querySelectorAll('[data-testid=message-assistant]')].map((message) =>
              [...message.querySelectorAll('[data-testid=text]')].map((part) => part.textContent).join(''),
            )
            return (
              (status === undefined || chat.getAttribute('data-status') === status) &&
              JSON.stringify(shown) === JSON.stringify(texts)
            )
          },
          { chat: chat!, texts, status },
          { timeout: 45_000 },
        )
      }
      /** Waits until the page is idle again with one assistant message whose text is `text`. */
      const answered = (tab: Page, text: string): Promise<void> => showing(tab, [text], 'ready')
      const assistantTexts = (tab: Page): Promise<string[]> =>
        tab
          .locator('[data-testid=message-assistant]')
          .evaluateAll((messages) =>
            messages.map((message) =>
              [...message.querySelectorAll('[data-testid=text]')].map((part) => part.textContent).join(''),
            ),
          )

      it('a streamed answer shows with its exact text, in one assistant message whose id is the run id', async () => {
        model.setTurns([{ text: 'Hello from Plinth, streamed word by word.' }])
        const { tab, conversationId } = await openChat()
        await send(tab, 'Say hello.')
        await answered(tab, 'Hello from Plinth, streamed word by word.')
        await expect(tab.locator('[data-testid=message-user]').innerText()).resolves.toContain('Say hello.')
        expect(await assistantTexts(tab)).toEqual(['Hello from Plinth, streamed word by word.'])
        const runId = await tab.locator('[data-testid=message-assistant]').getAttribute('data-message-id')
        expect((await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body).toMatchObject({
          conversationId,
          status: 'completed',
        })
        await expect(tab.locator('[data-testid=error]').count()).resolves.toBe(0)
        await tab.close()
      })

      it('a tool call Plinth runs shows as a tool part with its input and output, then the answer', async () => {
        model.setTurns([
          { toolCalls: [{ name: 'rdm__ping', arguments: { target: 'db-1' } }] },
          { text: 'db-1 answers.' },
        ])
        const { tab } = await openChat()
        await send(tab, 'Ping db-1.')
        await answered(tab, 'db-1 answers.')
        const tool = tab.locator('[data-testid=tool][data-tool-name=rdm__ping]')
        await expect(tool.getAttribute('data-state')).resolves.toBe('output-available')
        expect(JSON.parse(await tool.locator('[data-testid=tool-input]').innerText())).toEqual({ target: 'db-1' })
        expect(JSON.parse(await tool.locator('[data-testid=tool-output]').innerText())).toMatchObject({
          pong: true,
          target: 'db-1',
        })
        await tab.close()
      })

      it('a call that needs approval shows Approve; clicking it in the page lets the run go on to its answer', async () => {
        model.setTurns([
          {
            text: 'Writing it down.',
            toolCalls: [
              { name: 'rdm__draft__compose', arguments: { title: 'From the page', body: 'approved in Chromium' } },
            ],
          },
          { text: 'Done: the draft is written.' },
        ])
        const { tab } = await openChat()
        await send(tab, 'Write it up.')
        const tool = tab.locator('[data-testid=tool][data-tool-name=rdm__draft__compose]')
        await tool.locator('[data-testid=approve]').waitFor()
        await expect(tool.getAttribute('data-state')).resolves.toBe('approval-requested')
        await tab.locator('[data-testid=chat][data-status=ready]').waitFor()
        await tab.screenshot({ path: join(screenshots, `usechat-approval-asked-${engine}.png`), fullPage: true })
        const runId = await tab.locator('[data-testid=message-assistant]').getAttribute('data-message-id')
        const run = await server.request('GET', `/api/runs/${runId}`, { token: alice.token })
        expect(run.body.status).toBe('requires_action')
        const decisionId = run.body.requiredAction.decisions[0].decisionId as string
        await tool.locator('[data-testid=approve]').click()
        await answered(tab, 'Writing it down.Done: the draft is written.')
        await expect(tool.getAttribute('data-state')).resolves.toBe('output-available')
        expect(JSON.parse(await tool.locator('[data-testid=tool-output]').innerText())).toMatchObject({
          title: 'From the page',
          status: 'draft',
        })
        // The same assistant message went on: one of it, with the run's id; the decision is approved.
        await expect(tab.locator('[data-testid=message-assistant]').count()).resolves.toBe(1)
        await expect(tab.locator('[data-testid=message-assistant]').getAttribute('data-message-id')).resolves.toBe(
          runId,
        )
        expect((await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body.status).toBe(
          'completed',
        )
        expect(
          (await server.request('GET', `/api/decisions/${decisionId}`, { token: alice.token })).body,
        ).toMatchObject({ status: 'approved', runId })
        await tab.screenshot({ path: join(screenshots, `usechat-approval-${engine}.png`), fullPage: true })
        await tab.close()
      })

      it('a reload mid-answer resumes: the whole answer shows once, with the exact text', async () => {
        const { tab, conversationId } = await openChat({ model: 'gated' })
        await send(tab, 'Count to six, slowly.')
        await showing(tab, [halfAnswer], 'streaming')
        const runId = await tab.locator('[data-testid=message-assistant]').getAttribute('data-message-id')
        expect((await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body.status).toBe('running')
        // The reloaded page GETs the active run's message (useChat's resume): what came so far, once.
        const resumed = tab.waitForResponse(
          (response) =>
            response.request().method() === 'GET' &&
            response.url().endsWith(`/api/conversations/${conversationId}/ui-stream`),
        )
        await tab.reload()
        expect((await resumed).status()).toBe(200)
        await showing(tab, [halfAnswer], 'streaming')
        gated.open()
        await answered(tab, wholeAnswer)
        expect(await assistantTexts(tab)).toEqual([wholeAnswer])
        await expect(tab.locator('[data-testid=message-assistant]').getAttribute('data-message-id')).resolves.toBe(
          runId,
        )
        expect((await server.request('GET', `/api/runs/${runId}`, { token: alice.token })).body.status).toBe(
          'completed',
        )
        await tab.close()
      })
    })
  }
})
