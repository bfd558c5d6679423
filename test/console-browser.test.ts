import { existsSync } from 'node:fs'
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer, connect, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'

// The web console used as a person would: Debian's Chromium, clicking and typing, through a proxy
// the test can cut to drop the network mid-run. Screenshots of each step go to PLINTH_SCREENSHOTS.
const executablePath = process.env.PLINTH_CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((path) => existsSync(path))
if (!executablePath && process.env.REQUIRE_BROWSER === '1') throw new Error('REQUIRE_BROWSER=1 but no Chromium is installed (apt-get install chromium)')
if (!executablePath) console.warn('[plinth tests] skipping the console browser tests: no Chromium (apt-get install chromium)')

const screenshots = process.env.PLINTH_SCREENSHOTS ?? fileURLToPath(new URL('../test-artifacts/console/', import.meta.url))
const adminToken = 'console-admin-token-0123456789'
const slowWords = Array.from({ length: 120 }, (_, index) => `w${index}`)

const scripts = {
  decide: { turnBy: 'round', turns: [{ text: 'I will write it.', toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Memo', body: 'hello' } }] }, { text: 'The draft is written.' }] },
  slow: { turns: [{ text: slowWords.join(' '), chunks: 120, delayMs: 60 }] },
  exec: { turnBy: 'round', turns: [{ toolCalls: [{ name: 'exec', arguments: { command: 'for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done' } }] }, { text: 'Counted to five.' }] },
  client: { turnBy: 'round', turns: [{ toolCalls: [{ name: 'propose_command', arguments: { command: 'ls -la', reason: 'to look' } }] }, { text: 'Understood, not running it.' }] },
}

/** A TCP proxy in front of the server: `drop(ms)` cuts every connection and refuses new ones for a while. */
class CuttableProxy {
  readonly #server: Server
  readonly #sockets = new Set<Socket>()
  #downUntil = 0
  port = 0

  constructor(private readonly target: number) {
    this.#server = createServer((client) => {
      if (Date.now() < this.#downUntil) return client.destroy()
      const upstream = connect(this.target, '127.0.0.1')
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket)
        socket.on('close', () => this.#sockets.delete(socket))
        socket.on('error', () => socket.destroy())
      }
      client.pipe(upstream).pipe(client)
      client.on('close', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
    })
  }
  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve))
    this.port = (this.#server.address() as { port: number }).port
  }
  drop(ms: number): void {
    this.#downUntil = Date.now() + ms
    for (const socket of this.#sockets) socket.destroy()
  }
  close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy()
    return new Promise((resolve) => this.#server.close(() => resolve()))
  }
}

describe.skipIf(!executablePath)('the web console in Chromium', () => {
  let cwd: string
  let server: ServeProcess
  let proxy: CuttableProxy
  let browser: Browser
  let token: string
  let base: string

  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-console-'))
    // The sandbox user must reach the work directories below it (the admin test switches to the sandbox).
    await chmod(cwd, 0o755)
    for (const [name, script] of Object.entries(scripts)) await writeFile(join(cwd, `${name}.json`), JSON.stringify(script))
    await writeFile(
      join(cwd, 'plinth.config.json'),
      // Programs run on the server itself here by explicit choice: the admin test switches to the sandbox and back.
      JSON.stringify({ plugins: ['rdm'], models: Object.keys(scripts).map((id) => ({ id, provider: 'scripted', script: `${id}.json` })), defaultModel: 'decide', exec: { backend: 'direct' } }),
    )
    token = lastLine((await runPlinth(['users', 'create', 'alice'], { cwd })).stdout)
    server = await startServe({ cwd, env: { PLINTH_ADMIN_TOKEN: adminToken } })
    proxy = new CuttableProxy(Number(new URL(server.url).port))
    await proxy.listen()
    base = `http://127.0.0.1:${proxy.port}`
    await mkdir(screenshots, { recursive: true })
    console.log(`[plinth tests] console screenshots: ${screenshots}`)
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-dev-shm-usage'] })
  }, 120_000)
  afterAll(async () => {
    await browser?.close()
    await proxy?.close()
    await server?.kill()
    if (cwd) await rm(cwd, { recursive: true, force: true })
  })

  const newPage = async (): Promise<Page> => {
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    page.setDefaultTimeout(20_000)
    page.on('pageerror', (error) => console.warn('[console page error]', error.message))
    return page
  }
  const shot = (page: Page, name: string) => page.screenshot({ path: join(screenshots, `${name}.png`) })
  const signIn = async (page: Page, hash = ''): Promise<void> => {
    await page.goto(`${base}/console/${hash}`)
    await page.fill('input[name=token]', token)
    await page.click('form.signin button[type=submit]')
    await page.waitForSelector('#who >> text=alice')
  }
  const project = async (name: string, defaultModel: keyof typeof scripts): Promise<string> => {
    const created = await http(server.url, 'POST', '/api/projects', { token, body: { name, defaultModel } })
    expect(created.status).toBe(201)
    return created.body.id
  }

  it('a wrong token is refused once, with a message, and no retry loop', async () => {
    const page = await newPage()
    let meRequests = 0
    page.on('request', (request) => {
      if (request.url().endsWith('/api/me')) meRequests++
    })
    await page.goto(`${base}/console`)
    await page.fill('input[name=token]', 'plt_not-a-real-token')
    await page.click('form.signin button[type=submit]')
    await page.waitForSelector('p.error >> text=not accepted')
    await shot(page, '01-wrong-token')
    await page.waitForTimeout(1500)
    expect(meRequests).toBe(1)
    expect(await page.isVisible('input[name=token]')).toBe(true)
    await page.close()
  })

  it('sign in, create a project and a conversation, run, approve the decision in its card, see the answer and the audit', async () => {
    const page = await newPage()
    await signIn(page)
    await page.fill('input[name=name]', 'Console demo')
    await page.click('button >> text=Create project')
    await page.waitForSelector('#conversations')
    await shot(page, '02-project')
    await page.fill('input[name=title]', 'Memo chat')
    await page.click('button >> text=New conversation')
    await page.waitForSelector('#composer')
    await page.fill('#composer', 'Write a memo, please.')
    await page.click('#send')
    const card = page.locator('.decision')
    await card.locator('button[data-answer=approve]').waitFor()
    await expect(card.innerText()).resolves.toMatch(/Approval needed:\s*rdm\.draft\.compose\s*risk: high[\s\S]*Write draft "Memo"/)
    await expect(page.locator('#run-status').innerText()).resolves.toMatch(/Waiting for you/)
    await shot(page, '03-decision-card')
    await card.locator('button[data-answer=approve]').click()
    await page.waitForSelector('.msg.assistant >> text=The draft is written.')
    await page.waitForSelector('#run-status >> text=Completed.')
    await expect(card.innerText()).resolves.toMatch(/Approved by you/)
    await expect(page.locator('.call .call-status.status-ok').count()).resolves.toBe(1)
    await shot(page, '04-answer')
    await page.click('#audit-tab')
    await page.waitForSelector('table.audit >> text=rdm.draft.compose')
    await expect(page.locator('table.audit').innerText()).resolves.toMatch(/rdm\.draft\.compose\s+agent[\s\S]*approved by you\s+succeeded/)
    await shot(page, '05-audit')
    // Reloading shows the same conversation from the transcript, once.
    await page.reload()
    await page.waitForSelector('.msg.assistant >> text=The draft is written.')
    await expect(page.locator('.msg.user').count()).resolves.toBe(1)
    await expect(page.locator('.msg.assistant').count()).resolves.toBe(2)
    await page.close()
  })

  it('lists a project shared with you, marked shared', async () => {
    const bob = await http(server.url, 'POST', '/api/admin/users', { token: adminToken, body: { name: `bob-${Date.now()}` } })
    const bobToken = bob.body.token.token as string
    const aliceId = (await http(server.url, 'GET', '/api/me', { token })).body.id as string
    const shared = (await http(server.url, 'POST', '/api/projects', { token: bobToken, body: { name: 'Bob shares this' } })).body.id as string
    const asked = await http(server.url, 'POST', '/api/commands/rdm.member.add', { token: bobToken, body: { entrance: 'button', projectId: shared, params: { userId: aliceId } } })
    expect((await http(server.url, 'POST', `/api/decisions/${asked.body.decision.id}`, { token: bobToken, body: { decision: 'approve' } })).status).toBe(200)
    const page = await newPage()
    await signIn(page)
    const item = page.locator('#projects li', { hasText: 'Bob shares this' })
    await expect(item.locator('.tag').innerText()).resolves.toBe('shared')
    await item.locator('a').click()
    await page.waitForSelector('h1 >> text=shared with you')
    await page.close()
  })

  it('recovers from a dropped connection mid-run with no duplicated or missing text', async () => {
    const projectId = await project('Slow stream', 'slow')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: { title: 'drop' } })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Tell me a long story.')
    await page.click('#send')
    await page.waitForSelector('.msg.assistant.streaming >> text=w10')
    proxy.drop(1500)
    await page.waitForSelector('#banner >> text=reconnecting')
    await shot(page, '06-reconnecting')
    await page.waitForSelector('#run-status >> text=Completed.', { timeout: 40_000 })
    const text = await page.locator('.msg.assistant .text').innerText()
    expect(text.trim()).toBe(slowWords.join(' '))
    await expect(page.isVisible('#banner')).resolves.toBe(false)
    await shot(page, '07-recovered')
    await page.close()
  })

  it('shows a program’s output while it runs, after approving it', async () => {
    const projectId = await project('Exec output', 'exec')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Count to five.')
    await page.click('#send')
    await page.locator('.decision button[data-answer=approve]').click()
    // Live output arrives before the call completes.
    const call = page.locator('.call', { hasText: 'exec' })
    await call.locator('pre.live >> text=line 2').waitFor()
    await expect(call.locator('.call-status').innerText()).resolves.toBe('running')
    await shot(page, '08-exec-output')
    await page.waitForSelector('.msg.assistant >> text=Counted to five.')
    expect((await call.locator('pre.live').innerText()).trim()).toBe('line 1\nline 2\nline 3\nline 4\nline 5')
    await page.close()
  })

  it('a decision answered elsewhere updates its card instead of failing', async () => {
    const projectId = await project('Answered elsewhere', 'decide')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Write it.')
    await page.click('#send')
    await page.locator('.decision button[data-answer=approve]').waitFor()
    const decisions = await http(server.url, 'GET', '/api/decisions?status=pending', { token })
    const pending = decisions.body.items.find((item: { conversationId: string }) => item.conversationId === conversation.body.id)
    expect((await http(server.url, 'POST', `/api/decisions/${pending.id}`, { token, body: { decision: 'reject' } })).status).toBe(200)
    await page.waitForSelector('.decision >> text=Rejected by you.')
    await expect(page.locator('.decision button').count()).resolves.toBe(0)
    await page.waitForSelector('#run-status >> text=Completed.')
    await shot(page, '09-answered-elsewhere')

    // A click that comes too late (the card did not hear of the answer): it shows who answered.
    await page.fill('#composer', 'Write it again.')
    await page.click('#send')
    const card = page.locator('.decision').last()
    await card.locator('button[data-answer=approve]').waitFor()
    await page.route('**/api/stream-tickets', (route) => route.abort())
    proxy.drop(0)
    await page.waitForSelector('#banner >> text=reconnecting')
    const waiting = await http(server.url, 'GET', '/api/decisions?status=pending', { token })
    const second = waiting.body.items.find((item: { conversationId: string }) => item.conversationId === conversation.body.id)
    expect((await http(server.url, 'POST', `/api/decisions/${second.id}`, { token, body: { decision: 'reject' } })).status).toBe(200)
    await card.locator('button[data-answer=approve]').click()
    await card.locator('text=Rejected by you. (answered elsewhere)').waitFor()
    await expect(card.locator('button').count()).resolves.toBe(0)
    await page.unroute('**/api/stream-tickets')
    await page.close()
  })

  it('answers a client tool of a run started elsewhere (opened mid-run), and can cancel a run', async () => {
    const projectId = await project('Client tools', 'client')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const started = await http(server.url, 'POST', `/api/conversations/${conversation.body.id}/runs?wait=true`, { token, body: { input: 'look around', clientTools: ['propose_command'] } })
    expect(started.body.status).toBe('requires_action')
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    const call = page.locator('.call', { hasText: 'propose_command' })
    await call.locator('button >> text=Decline').waitFor()
    await expect(call.innerText()).resolves.toMatch(/ls -la/)
    await shot(page, '10-client-tool')
    await call.locator('button >> text=Decline').click()
    await page.waitForSelector('.msg.assistant >> text=Understood, not running it.')
    const run = await http(server.url, 'GET', `/api/runs/${started.body.id}`, { token })
    expect(run.body.status).toBe('completed')

    // Cancel: a slow run stops, keeping its partial text.
    await page.selectOption('select[name=model]', 'slow')
    await page.fill('#composer', 'Another long one.')
    await page.click('#send')
    await page.waitForSelector('.msg.assistant.streaming >> text=w5')
    await page.click('#cancel')
    await page.waitForSelector('#run-status >> text=Cancelled.')
    await expect(page.locator('#send').isEnabled()).resolves.toBe(true)
    await page.close()
  })

  it('adds knowledge and finds it by search', async () => {
    const projectId = await project('Knowledge', 'decide')
    const page = await newPage()
    await signIn(page, `#/projects/${projectId}`)
    await page.fill('input[name=title][aria-label="Knowledge title"]', 'Deploy notes')
    await page.fill('textarea[name=text]', 'The blue-green deploy switches traffic with the lighthouse script after the canary passes.')
    await page.click('button >> text=Add knowledge')
    await page.waitForSelector('#knowledge >> text=Deploy notes')
    await page.fill('input[name=q]', 'lighthouse canary')
    await page.click('button >> text=Search')
    await page.waitForSelector('#search-results >> text=Deploy notes')
    // A file, uploaded as multipart.
    await page.fill('input[name=title][aria-label="Knowledge title"]', 'Runbook file')
    await page.setInputFiles('input[type=file]', { name: 'runbook.md', mimeType: 'text/markdown', buffer: Buffer.from('# Runbook\n\nRestart the quartzite worker when the queue stalls.\n') })
    await page.click('button >> text=Add knowledge')
    await page.waitForSelector('#knowledge >> text=Runbook file')
    // A file ingests in the background: the list shows it pending until it is ready, as a person sees.
    await page.waitForSelector('#knowledge li:has-text("Runbook file"):not(:has(.warn))', { timeout: 30_000 })
    await page.fill('input[name=q]', 'quartzite worker')
    await page.click('button >> text=Search')
    await page.waitForSelector('#search-results >> text=Runbook file', { timeout: 30_000 })
    await shot(page, '11-knowledge')
    await page.close()
  })

  it('with the admin token, shows and switches the execution backend', async () => {
    const page = await newPage()
    await signIn(page, '#/admin')
    await page.fill('input[name=adminToken]', 'not-the-admin-token')
    await page.click('button >> text=Open settings')
    await page.waitForSelector('text=That admin token was not accepted.')
    await page.fill('input[name=adminToken]', adminToken)
    await page.click('button >> text=Open settings')
    await page.waitForSelector('#exec-backend >> text=direct')
    await page.selectOption('select[name=execBackend]', 'sandbox')
    await page.click('button >> text=Apply')
    const status = page.locator('p[role=status]', { hasText: /Switched|Not switched/ })
    await status.waitFor()
    const settings = await fetch(`${server.url}/api/admin/settings`, { headers: { authorization: `Bearer ${adminToken}` } }).then(
      (response) => response.json() as Promise<{ execBackend: string; sandbox: { ok: boolean } }>,
    )
    // Where the sandbox works (CI prepares it), the switch happens; elsewhere the page says why not.
    if (settings.sandbox.ok) {
      await expect(status.innerText()).resolves.toBe('Switched to sandbox.')
      expect(settings.execBackend).toBe('sandbox')
      await page.waitForSelector('#exec-backend >> text=sandbox')
    } else {
      await expect(status.innerText()).resolves.toMatch(/^Not switched: /)
      expect(settings.execBackend).toBe('direct')
    }
    await shot(page, '12-admin')
    await page.selectOption('select[name=execBackend]', 'direct')
    await page.click('button >> text=Apply')
    await page.waitForSelector('#exec-backend >> text=direct')
    await page.close()
  })
})
