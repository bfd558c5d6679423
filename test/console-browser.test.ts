import { existsSync } from 'node:fs'
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { CuttableProxy } from './helpers/cuttable-proxy.js'

// The web console used as a person would: Debian's Chromium, clicking and typing, through a proxy
// the test can cut to drop the network mid-run. Screenshots of each step go to PLINTH_SCREENSHOTS.
const executablePath =
  process.env.PLINTH_CHROMIUM ??
  ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((path) => existsSync(path))
if (!executablePath && process.env.REQUIRE_BROWSER === '1')
  throw new Error('REQUIRE_BROWSER=1 but no Chromium is installed (apt-get install chromium)')
if (!executablePath)
  console.warn('[plinth tests] skipping the console browser tests: no Chromium (apt-get install chromium)')

const screenshots =
  process.env.PLINTH_SCREENSHOTS ?? fileURLToPath(new URL('../test-artifacts/console/', import.meta.url))
const adminToken = 'console-admin-token-0123456789'
const slowWords = Array.from({ length: 120 }, (_, index) => `w${index}`)

// Ordinary Markdown the console renders as HTML, and hostile HTML and links it must neutralise.
const markdownAnswer = [
  '## Plan',
  '',
  '- first step',
  '- second step',
  '',
  '```',
  'npm test',
  '```',
  '',
  '| key | value |',
  '| --- | ----- |',
  '| a | 2 |',
  '',
  'Read [the docs](https://example.com/docs).',
  '',
  '<img src=x onerror="window.__pwned = 1; alert(1)">',
  '',
  '[click me](javascript:window.__pwned=2)',
  '',
  '<script>window.__pwned = 3</script>',
  '',
  '<a href="JaVaScRiPt:window.__pwned=4">raw link</a> <svg onload="window.__pwned=5"></svg> <iframe src="javascript:window.__pwned=6"></iframe>',
].join('\n')
const chineseAnswer = '数据库已经准备好了，请开始测试。'

const scripts = {
  markdown: { turns: [{ text: markdownAnswer }] },
  chinese: { turns: [{ text: chineseAnswer }] },
  // Calls a tool it does not have, even when told to stop: a run capped at one iteration fails.
  loop: { turns: [{ toolCalls: [{ name: 'no_such_tool', arguments: {} }], evenWithoutTools: true }] },
  decide: {
    turnBy: 'round',
    turns: [
      {
        text: 'I will write it.',
        toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Memo', body: 'hello' } }],
      },
      { text: 'The draft is written.' },
    ],
  },
  slow: { turns: [{ text: slowWords.join(' '), chunks: 120, delayMs: 60 }] },
  // U+202E makes what follows it read backwards: "rm -rf notes #" then "txt.emdaer tac" shown as "cat readme.txt".
  spoof: {
    turnBy: 'round',
    turns: [
      { toolCalls: [{ name: 'exec', arguments: { command: 'rm -rf notes #\u202etxt.emdaer tac' } }] },
      { text: 'Not run.' },
    ],
  },
  exec: {
    turnBy: 'round',
    turns: [
      { toolCalls: [{ name: 'exec', arguments: { command: 'for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done' } }] },
      { text: 'Counted to five.' },
    ],
  },
  plot: {
    turnBy: 'round',
    turns: [
      {
        toolCalls: [
          {
            name: 'exec',
            arguments: {
              command:
                'echo iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAIAAAA2iEnWAAAAEklEQVR4nGP4z8DAwMDAwMAAAAQAAf/pMS8AAAAASUVORK5CYII= | base64 -d > plot.png',
            },
          },
        ],
      },
      { text: 'The plot is ready.' },
    ],
  },
  client: {
    turnBy: 'round',
    turns: [
      { toolCalls: [{ name: 'propose_command', arguments: { command: 'ls -la', reason: 'to look' } }] },
      { text: 'Understood, not running it.' },
    ],
  },
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
    for (const [name, script] of Object.entries(scripts))
      await writeFile(join(cwd, `${name}.json`), JSON.stringify(script))
    await writeFile(
      join(cwd, 'plinth.config.json'),
      // Programs run on the server itself here by explicit choice: the admin test switches to the sandbox and back.
      JSON.stringify({
        plugins: ['rdm'],
        models: Object.keys(scripts).map((id) => ({ id, provider: 'scripted', script: `${id}.json` })),
        defaultModel: 'decide',
        exec: { backend: 'direct' },
      }),
    )
    token = lastLine((await runPlinth(['users', 'create', 'alice'], { cwd })).stdout)
    // One user drives every test here, some with hundreds of requests: above the default 600 a minute.
    server = await startServe({ cwd, env: { PLINTH_ADMIN_TOKEN: adminToken, PLINTH_RATE_LIMIT_MAX: '6000' } })
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

  /**
   * A conversation with one answered question, opened in a new page whose first request matching
   * `held` waits: `holding` resolves when it is held, `release` lets it go, `signedIn` when the page is open.
   */
  const openWithHeldRead = async (name: string, held: (url: URL, conversation: string) => boolean) => {
    const projectId = await project(name, 'markdown')
    const conversation = (
      await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    ).body.id as string
    await http(server.url, 'POST', `/api/conversations/${conversation}/runs?wait=true`, {
      token,
      body: { input: 'the first question' },
    })
    const page = await newPage()
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    let reached!: () => void
    const holding = new Promise<void>((resolve) => (reached = resolve))
    await page.route(
      (url) => held(url, conversation),
      async (route) => {
        reached()
        await released
        await route.continue()
      },
    )
    const signedIn = signIn(page, `#/conversations/${conversation}`)
    await holding
    return { page, conversation, release, signedIn }
  }

  it('a wrong token is refused once, with a message, and no retry loop', async () => {
    const page = await newPage()
    let meRequests = 0
    page.on('request', (request) => {
      if (request.url().endsWith('/api/me')) meRequests++
    })
    await page.goto(`${base}/console`)
    // The placeholder shows the real token prefix.
    await expect(page.getAttribute('input[name=token]', 'placeholder')).resolves.toBe('plt_…')
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
    await expect(card.innerText()).resolves.toMatch(
      /Approval needed:\s*rdm\.draft\.compose\s*risk: high[\s\S]*Write draft "Memo"/,
    )
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
    await expect(page.locator('table.audit').innerText()).resolves.toMatch(
      /rdm\.draft\.compose\s+agent[\s\S]*approved by you\s+succeeded/,
    )
    await shot(page, '05-audit')
    // Reloading shows the same conversation from the transcript, once.
    await page.reload()
    await page.waitForSelector('.msg.assistant >> text=The draft is written.')
    await expect(page.locator('.msg.user').count()).resolves.toBe(1)
    await expect(page.locator('.msg.assistant').count()).resolves.toBe(2)
    await page.close()
  })

  it('lists a project shared with you, marked shared', async () => {
    const bob = await http(server.url, 'POST', '/api/admin/users', {
      token: adminToken,
      body: { name: `bob-${Date.now()}` },
    })
    const bobToken = bob.body.token.token as string
    const aliceId = (await http(server.url, 'GET', '/api/me', { token })).body.id as string
    const shared = (
      await http(server.url, 'POST', '/api/projects', { token: bobToken, body: { name: 'Bob shares this' } })
    ).body.id as string
    const asked = await http(server.url, 'POST', '/api/commands/rdm.member.add', {
      token: bobToken,
      body: { entrance: 'button', projectId: shared, params: { userId: aliceId } },
    })
    expect(
      (
        await http(server.url, 'POST', `/api/decisions/${asked.body.decision.id}`, {
          token: bobToken,
          body: { decision: 'approve' },
        })
      ).status,
    ).toBe(200)
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
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, {
      token,
      body: { title: 'drop' },
    })
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

  it('shows the image a tool wrote under its result, live and after a reload', async () => {
    const projectId = await project('Plotted', 'plot')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Plot it.')
    await page.click('#send')
    await page.locator('.decision button[data-answer=approve]').click()
    await page.waitForSelector('.msg.assistant >> text=The plot is ready.')
    const size = () =>
      page.evaluate(
        "(() => { const img = document.querySelector('.call img.attached'); return img && img.complete ? img.naturalWidth + 'x' + img.naturalHeight : '' })()",
      )
    await expect.poll(size, { timeout: 20_000 }).toBe('2x3')
    await shot(page, '18-tool-image')
    await page.reload()
    await page.waitForSelector('.msg.assistant >> text=The plot is ready.')
    await expect.poll(size, { timeout: 20_000 }).toBe('2x3')
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
    const pending = decisions.body.items.find(
      (item: { conversationId: string }) => item.conversationId === conversation.body.id,
    )
    expect(
      (await http(server.url, 'POST', `/api/decisions/${pending.id}`, { token, body: { decision: 'reject' } })).status,
    ).toBe(200)
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
    const second = waiting.body.items.find(
      (item: { conversationId: string }) => item.conversationId === conversation.body.id,
    )
    expect(
      (await http(server.url, 'POST', `/api/decisions/${second.id}`, { token, body: { decision: 'reject' } })).status,
    ).toBe(200)
    await card.locator('button[data-answer=approve]').click()
    await card.locator('text=Rejected by you. (answered elsewhere)').waitFor()
    await expect(card.locator('button').count()).resolves.toBe(0)
    await page.unroute('**/api/stream-tickets')
    await page.close()
  })

  it('shows an image a message carries in the transcript', async () => {
    const projectId = await project('With an image', 'markdown')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    // A 2×3 PNG, sent inline with the question.
    const png = 'iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAIAAAA2iEnWAAAAEklEQVR4nGP4z8DAwMDAwMAAAAQAAf/pMS8AAAAASUVORK5CYII='
    const run = await http(server.url, 'POST', `/api/conversations/${conversation.body.id}/runs?wait=true`, {
      token,
      body: {
        input: [
          { type: 'text', text: 'What is in this picture?' },
          { type: 'image', url: `data:image/png;base64,${png}` },
        ],
      },
    })
    expect(run.status).toBe(201)
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    const image = page.locator('.msg.user img.attached')
    await image.waitFor()
    // The file came through the files API (with the token) and decoded: its real size.
    await expect
      .poll(
        () =>
          page.evaluate(
            "(() => { const img = document.querySelector('.msg.user img.attached'); return img && img.complete ? img.naturalWidth + 'x' + img.naturalHeight : '' })()",
          ),
        { timeout: 20_000 },
      )
      .toBe('2x3')
    await expect(page.locator('.msg.user').first().textContent()).resolves.toMatch(/What is in this picture\?/)
    await shot(page, '16-message-image')
    await page.close()
  })

  it('shows a compaction where the messages it summarises end, with its summary', async () => {
    const projectId = await project('Compacted', 'chinese')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const id = conversation.body.id as string
    for (const input of ['first question', 'second question'])
      expect(
        (await http(server.url, 'POST', `/api/conversations/${id}/runs?wait=true`, { token, body: { input } })).status,
      ).toBe(201)
    const compacted = await http(server.url, 'POST', `/api/conversations/${id}/compact`, { token, body: {} })
    expect([compacted.status, compacted.body.messageCount]).toEqual([201, 2])
    const page = await newPage()
    await signIn(page, `#/conversations/${id}`)
    const item = page.locator('details.compaction')
    await item.waitFor()
    const order = await page.evaluate(
      "[...document.querySelectorAll('.msg.user, details.compaction')].map((el) => el.matches('details.compaction') ? 'compaction' : el.textContent.includes('second') ? 'second' : 'first')",
    )
    expect(order).toEqual(['first', 'compaction', 'second'])
    await expect(item.locator('summary').textContent()).resolves.toMatch(/2 messages above are summarised/)
    await item.locator('summary').click()
    await expect(item.locator('.text').textContent()).resolves.toBe(compacted.body.summary)
    await shot(page, '17-compaction')
    await page.close()
  })

  it('edits a decision’s arguments in its card, or answers in its place', async () => {
    const projectId = await project('Edited in the card', 'decide')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Write it.')
    await page.click('#send')
    const card = page.locator('.decision').last()
    await card.locator('button[data-answer=edit]').click()
    const area = card.locator('textarea[data-reply=edit]')
    await expect(area.inputValue()).resolves.toMatch(/"title": "Memo"/)
    await area.fill('{"title": "Edited in the card", "body": "hello"}')
    await shot(page, '14-decision-edit')
    await card.locator('button[data-send=edit]').click()
    await card.locator('text=Approved with edited arguments by you.').waitFor()
    await page.waitForSelector('#run-status >> text=Completed.')
    const approved = await http(server.url, 'GET', '/api/decisions?status=approved', { token })
    expect(
      approved.body.items.find((item: { conversationId: string }) => item.conversationId === conversation.body.id),
    ).toMatchObject({ reply: { kind: 'edit', params: { title: 'Edited in the card' } } })

    await page.fill('#composer', 'Write another.')
    await page.click('#send')
    const second = page.locator('.decision').last()
    await second.locator('button[data-answer=respond]').click()
    await second.locator('textarea[data-reply=respond]').fill('Not today.')
    await second.locator('button[data-send=respond]').click()
    await second.locator('text=Answered instead of running by you.').waitFor()
    await page.waitForSelector('#run-status >> text=Completed.')
    await shot(page, '15-decision-respond')
    await page.close()
  })

  it('answers a client tool of a run started elsewhere (opened mid-run), and can cancel a run', async () => {
    const projectId = await project('Client tools', 'client')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const started = await http(server.url, 'POST', `/api/conversations/${conversation.body.id}/runs?wait=true`, {
      token,
      body: { input: 'look around', clientTools: ['propose_command'] },
    })
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

  it('an open conversation follows runs started by another client, one after another', async () => {
    const projectId = await project('Started elsewhere', 'chinese')
    const conversation = (
      await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    ).body.id
    const first = await http(server.url, 'POST', `/api/conversations/${conversation}/runs?wait=true`, {
      token,
      body: { input: 'an earlier question' },
    })
    expect(first.body.status).toBe('completed')
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation}`)
    await page.waitForSelector('.msg.user >> text=an earlier question')
    // Idle in the browser; a run starts from elsewhere (another tab, plinth chat, a schedule).
    for (const [input, model] of [
      ['asked from another client', 'markdown'],
      ['and once more', 'client'],
    ] as const) {
      const run = await http(server.url, 'POST', `/api/conversations/${conversation}/runs`, {
        token,
        body: { input, model, ...(model === 'client' && { clientTools: ['propose_command'] }) },
      })
      expect(run.status).toBe(201)
      await page.waitForSelector(`.msg.user >> text=${input}`)
    }
    // The second run waits for its client tool: the card is live here, and answering it ends the run.
    const call = page.locator('.call', { hasText: 'propose_command' })
    await call.locator('button >> text=Decline').click()
    await page.waitForSelector('.msg.assistant >> text=Understood, not running it.')
    await page.waitForSelector('#run-status >> text=Completed.')
    await expect(page.locator('.msg.user', { hasText: 'asked from another client' }).count()).resolves.toBe(1)
    // A run queued behind another (its run.created came before the first one ended) is followed too.
    const slow = await http(server.url, 'POST', `/api/conversations/${conversation}/runs`, {
      token,
      body: { input: 'a slow one', model: 'slow' },
    })
    const queued = await http(server.url, 'POST', `/api/conversations/${conversation}/runs`, {
      token,
      body: { input: 'queued behind it', model: 'markdown', ifActive: 'enqueue' },
    })
    expect([slow.status, queued.status]).toEqual([201, 201])
    await page.waitForSelector('.msg.user >> text=a slow one')
    await http(server.url, 'POST', `/api/runs/${slow.body.id}/cancel`, { token })
    await page.waitForSelector('.msg.user >> text=queued behind it', { timeout: 30_000 })
    await shot(page, '16-started-elsewhere')
    await page.close()
  })

  it('a run that starts and ends while the conversation opens is shown', async () => {
    // The page's look at the last run is held until a run started elsewhere has ended.
    const { page, conversation, release, signedIn } = await openWithHeldRead(
      'Opened meanwhile',
      (url, id) => url.pathname === `/api/conversations/${id}/runs` && url.searchParams.get('limit') === '1',
    )
    const meanwhile = await http(server.url, 'POST', `/api/conversations/${conversation}/runs?wait=true`, {
      token,
      body: { input: 'asked while the page opened' },
    })
    expect(meanwhile.body.status).toBe('completed')
    release()
    await signedIn
    await page.waitForSelector('.msg.user >> text=asked while the page opened')
    await page.close()
  })

  it('a run that ends while the transcript loads is shown once, with its status once', async () => {
    // The transcript's read is held while a run starts and is cancelled mid-answer: the transcript then
    // shows it, and the conversation's stream replays it.
    const { page, conversation, release, signedIn } = await openWithHeldRead(
      'Loaded meanwhile',
      (url, id) => url.pathname === `/api/conversations/${id}/messages`,
    )
    const cut = await http(server.url, 'POST', `/api/conversations/${conversation}/runs`, {
      token,
      body: { input: 'cut short while the page opened', model: 'slow' },
    })
    const phase = async (): Promise<string> =>
      (await http(server.url, 'GET', `/api/runs/${cut.body.id}`, { token })).body.phase
    await expect.poll(phase, { timeout: 30_000 }).toBe('thinking')
    await http(server.url, 'POST', `/api/runs/${cut.body.id}/cancel`, { token })
    release()
    await signedIn
    await page.waitForSelector('#run-status >> text=/cancelled/i')
    await expect(page.locator('.msg.user', { hasText: 'cut short while the page opened' }).count()).resolves.toBe(1)
    const notes = await page.locator('.msg.assistant .muted.small').allTextContents()
    expect(notes.filter((note) => note.startsWith('('))).toHaveLength(1)
    await page.close()
  })

  it('Enter picking an input method’s candidate does not send; a malformed id is not found', async () => {
    const projectId = await project('输入法', 'markdown')
    const conversation = (
      await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    ).body.id
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation}`)
    await page.waitForSelector('#composer')
    await page.focus('#composer')
    // What Chrome sends while a Chinese input method composes: Enter with isComposing, keyCode 229.
    const cdp = await page.context().newCDPSession(page)
    await cdp.send('Input.imeSetComposition', { text: 'nihao', selectionStart: 5, selectionEnd: 5 })
    await page.evaluate(
      "document.getElementById('composer').dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', keyCode: 229, isComposing: true, bubbles: true }))",
    )
    await cdp.send('Input.insertText', { text: '你好' })
    // Nothing was sent: no run in the conversation, and the text is still there to finish.
    const runs = await http(server.url, 'GET', `/api/conversations/${conversation}/runs`, { token })
    expect(runs.body.items).toEqual([])
    await expect(page.inputValue('#composer')).resolves.toContain('你好')
    await page.press('#composer', 'Enter')
    await page.waitForSelector('.msg.user >> text=你好')

    await page.goto(`${base}/console/#/conversations/not-an-id`)
    await page.waitForSelector('main >> text=Not found (or not yours).')
    await expect(page.locator('#banner').isVisible()).resolves.toBe(false)
    await page.close()
  })

  it('a token revoked while a conversation is open returns the page to the sign-in form', async () => {
    const me = (await http(server.url, 'GET', '/api/me', { token })).body
    const issued = await http(server.url, 'POST', `/api/admin/users/${me.id}/tokens`, {
      token: adminToken,
      body: { name: 'short-lived' },
    })
    expect(issued.status).toBe(201)
    const projectId = await project('Revoked while open', 'markdown')
    const conversation = (
      await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    ).body.id
    const page = await newPage()
    await page.goto(`${base}/console/#/conversations/${conversation}`)
    await page.fill('input[name=token]', issued.body.token)
    await page.click('form.signin button[type=submit]')
    await page.waitForSelector('#composer')
    expect(
      (await http(server.url, 'DELETE', `/api/admin/tokens/${issued.body.id}`, { token: adminToken })).status,
    ).toBe(204)
    // The stream closes for access, the page finds its token refused, and asks for another.
    await page.waitForSelector('form.signin input[name=token]', { timeout: 30_000 })
    // The reason stays (it used to be drawn, then wiped by the address's change to #/ a moment later).
    await page.waitForFunction('location.hash === "#/"')
    // Tasks already queued (a hashchange among them) run before this one.
    await page.evaluate('new Promise((resolve) => setTimeout(resolve, 0))')
    await expect(page.locator('form.signin .error').textContent()).resolves.toMatch(/no longer accepted/)
    await page.close()
  })

  it('on a phone-sized screen nothing scrolls sideways, and a long project name stays on one line', async () => {
    const projectId = await project(`很长的项目名称${'—很长的项目名称'.repeat(8)}`, 'markdown')
    const conversation = (
      await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    ).body.id
    const page = await browser.newPage({ viewport: { width: 360, height: 740 } })
    page.setDefaultTimeout(20_000)
    await signIn(page, `#/conversations/${conversation}`)
    await page.waitForSelector('#composer')
    await page.waitForSelector('#crumbs a')
    const layout = (await page.evaluate(`({
      scrollWidth: document.documentElement.scrollWidth,
      width: window.innerWidth,
      header: document.querySelector('header').getBoundingClientRect().height,
      signOut: [...document.querySelectorAll('#who button')].at(-1).getBoundingClientRect().right,
    })`)) as { scrollWidth: number; width: number; header: number; signOut: number }
    await shot(page, '24-phone-conversation')
    expect(layout.scrollWidth).toBeLessThanOrEqual(layout.width)
    expect(layout.signOut).toBeLessThanOrEqual(layout.width)
    expect(layout.header).toBeLessThan(120)
    await page.close()
  })

  it('adds knowledge and finds it by search', async () => {
    const projectId = await project('Knowledge', 'decide')
    const page = await newPage()
    await signIn(page, `#/projects/${projectId}`)
    await page.fill('input[name=title][aria-label="Knowledge title"]', 'Deploy notes')
    await page.fill(
      'textarea[name=text]',
      'The blue-green deploy switches traffic with the lighthouse script after the canary passes.',
    )
    await page.click('button >> text=Add knowledge')
    await page.waitForSelector('#knowledge >> text=Deploy notes')
    await page.fill('input[name=q]', 'lighthouse canary')
    await page.click('button >> text=Search')
    await page.waitForSelector('#search-results >> text=Deploy notes')
    // A file, uploaded as multipart.
    await page.fill('input[name=title][aria-label="Knowledge title"]', 'Runbook file')
    await page.setInputFiles('input[type=file]', {
      name: 'runbook.md',
      mimeType: 'text/markdown',
      buffer: Buffer.from('# Runbook\n\nRestart the quartzite worker when the queue stalls.\n'),
    })
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
    const settings = await fetch(`${server.url}/api/admin/settings`, {
      headers: { authorization: `Bearer ${adminToken}` },
    }).then((response) => response.json() as Promise<{ execBackend: string; sandbox: { ok: boolean } }>)
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

  it('renders the model’s Markdown as HTML and neutralises hostile HTML and links, live and on reload', async () => {
    const projectId = await project('Markdown', 'markdown')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const page = await newPage()
    const dialogs: string[] = []
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.message())
      void dialog.dismiss()
    })
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Plan it.')
    await page.click('#send')
    await page.waitForSelector('#run-status >> text=Completed.')
    const answer = page.locator('.msg.assistant .text')
    const check = async () => {
      await answer.locator('h2 >> text=Plan').waitFor()
      await expect(answer.locator('ul > li').allInnerTexts()).resolves.toEqual(['first step', 'second step'])
      await expect(answer.locator('pre code').innerText()).resolves.toMatch(/^npm test\s*$/)
      await expect(answer.locator('table td').allInnerTexts()).resolves.toEqual(['a', '2'])
      await expect(answer.locator('a', { hasText: 'the docs' }).getAttribute('href')).resolves.toBe(
        'https://example.com/docs',
      )
      // In the page (a string: the tests compile without the DOM library).
      const hostile = await page.evaluate(`(() => {
        const all = [...document.getElementById('log').querySelectorAll('*')]
        return {
          pwned: window.__pwned ?? null,
          scripts: document.querySelectorAll('#log script, #log iframe').length,
          handlers: all.flatMap((el) => el.getAttributeNames().filter((name) => name.startsWith('on'))),
          scriptHrefs: all.map((el) => el.getAttribute('href') ?? el.getAttribute('src') ?? '').filter((url) => /^\\s*javascript:/i.test(url)),
        }
      })()`)
      expect(hostile).toEqual({ pwned: null, scripts: 0, handlers: [], scriptHrefs: [] })
    }
    await check()
    // The neutralised link is inert: clicking it runs nothing.
    await answer.locator('text=click me').click()
    await shot(page, '13-markdown')
    await page.reload()
    await check()
    await page.waitForTimeout(500)
    expect(await page.evaluate('window.__pwned ?? null')).toBeNull()
    expect(dialogs).toEqual([])
    await page.close()
  })

  it('a decision card names the bidirectional controls in a command instead of letting them reorder it', async () => {
    const projectId = await project('Spoofed command', 'spoof')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Show me the readme.')
    await page.click('#send')
    const card = page.locator('.decision').last()
    await card.locator('pre.preview').waitFor()
    const preview = (await card.locator('pre.preview').textContent()) ?? ''
    expect(preview).toContain('rm -rf notes #<U+202E>txt.emdaer tac')
    expect(preview).not.toContain('\u202e')
    await card.locator('summary').click()
    expect(await card.locator('pre.args').textContent()).toContain('<U+202E>')
    expect(await page.locator('div.call pre.args').last().textContent()).toContain('<U+202E>')
    // The rules the line matches are named on the call, in words.
    expect(await page.locator('div.call div.rules').last().textContent()).toBe(
      'matched rules: recursive forced delete (rm -rf)',
    )
    // Editing shows it as a JSON escape, which reads back as the same character.
    await card.locator('button[data-answer=edit]').click()
    const edited = await card.locator('textarea[data-reply=edit]').inputValue()
    expect(edited).toContain('#\\u202etxt.emdaer tac')
    expect(edited).not.toContain('\u202e')
    expect(JSON.parse(edited)).toEqual({ command: 'rm -rf notes #\u202etxt.emdaer tac' })
    await shot(page, '17-decision-bidi')
    await card.locator('button[data-answer=reject]').click()
    await page.waitForSelector('#run-status >> text=Completed.')
    await page.close()
  })

  it('renders Chinese text with a CJK font, not as empty boxes', async () => {
    const projectId = await project('中文项目', 'chinese')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, {
      token,
      body: { title: '中文对话' },
    })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', '你好')
    await page.click('#send')
    await page.waitForSelector(`.msg.assistant .text p >> text=${chineseAnswer}`)
    const family = await page.evaluate("getComputedStyle(document.querySelector('.msg.assistant .text p')).fontFamily")
    expect(family).toContain('Noto Sans CJK SC')
    // The fonts Chromium actually drew the answer with (DevTools protocol): a CJK font, for every glyph.
    const cdp = await page.context().newCDPSession(page)
    await cdp.send('DOM.enable')
    await cdp.send('CSS.enable')
    const { root } = await cdp.send('DOM.getDocument', { depth: -1 })
    const { nodeId } = await cdp.send('DOM.querySelector', { nodeId: root.nodeId, selector: '.msg.assistant .text p' })
    const { fonts } = await cdp.send('CSS.getPlatformFontsForNode', { nodeId })
    const cjk = fonts.filter((font) => /CJK|Source Han|PingFang|YaHei/i.test(font.familyName))
    expect(
      cjk.reduce((sum, font) => sum + font.glyphCount, 0),
      JSON.stringify(fonts),
    ).toBe([...chineseAnswer].length)
    await shot(page, '14-chinese')
    await page.close()
  })

  it('reopening a conversation shows how its last run ended, and why: failed, cancelled, waiting for a decision', async () => {
    const page = await newPage()
    await signIn(page)
    const open = async (conversationId: string) => {
      await page.goto(`${base}/console/#/conversations/${conversationId}`)
      await page.waitForSelector('#composer')
    }

    const failedProject = await project('Failed run', 'loop')
    const failed = (await http(server.url, 'POST', `/api/projects/${failedProject}/conversations`, { token, body: {} }))
      .body.id as string
    const failedRun = await http(server.url, 'POST', `/api/conversations/${failed}/runs?wait=true`, {
      token,
      body: { input: 'go', maxIterations: 1 },
    })
    expect(failedRun.body.status).toBe('failed')
    await open(failed)
    await page.waitForSelector('#run-status >> text=Failed:')
    await expect(page.locator('#run-status').innerText()).resolves.toBe(
      `Failed: ${failedRun.body.error.message} (${failedRun.body.error.code})`,
    )
    await shot(page, '15-reopened-failed')

    const slowProject = await project('Cancelled run', 'slow')
    const cancelled = (
      await http(server.url, 'POST', `/api/projects/${slowProject}/conversations`, { token, body: {} })
    ).body.id as string
    const slowRun = await http(server.url, 'POST', `/api/conversations/${cancelled}/runs`, {
      token,
      body: { input: 'go' },
    })
    await http(server.url, 'POST', `/api/runs/${slowRun.body.id}/cancel`, { token })
    await expect
      .poll(async () => (await http(server.url, 'GET', `/api/runs/${slowRun.body.id}`, { token })).body.status, {
        timeout: 20_000,
      })
      .toBe('cancelled')
    await open(cancelled)
    await page.waitForSelector('#run-status >> text=Cancelled.')

    const decideProject = await project('Waiting run', 'decide')
    const waiting = (
      await http(server.url, 'POST', `/api/projects/${decideProject}/conversations`, { token, body: {} })
    ).body.id as string
    const waitingRun = await http(server.url, 'POST', `/api/conversations/${waiting}/runs?wait=true`, {
      token,
      body: { input: 'write it' },
    })
    expect(waitingRun.body.status).toBe('requires_action')
    await open(waiting)
    await page.waitForSelector('#run-status >> text=Waiting for you')
    await page.locator('.decision button[data-answer=reject]').waitFor()
    await page.close()
  })

  it('a tool result looks the same live and after a reload', async () => {
    const projectId = await project('Tool results', 'decide')
    const conversation = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, { token, body: {} })
    const page = await newPage()
    await signIn(page, `#/conversations/${conversation.body.id}`)
    await page.fill('#composer', 'Write it.')
    await page.click('#send')
    await page.locator('.decision button[data-answer=reject]').click()
    await page.waitForSelector('#run-status >> text=Completed.')
    const call = page.locator('.call', { hasText: 'rdm__draft__compose' })
    const seen = async () => ({
      status: await call.locator('.call-status').innerText(),
      result: await call.locator('pre.result').innerText(),
    })
    const live = await seen()
    expect(live.status).toBe('rejected')
    await page.reload()
    await page.waitForSelector('.msg.assistant >> text=The draft is written.')
    await expect(seen()).resolves.toEqual(live)
    await page.close()
  })

  it('knowledge shows ready (1 chunk) or failed with the reason', async () => {
    const projectId = await project('Knowledge states', 'decide')
    const page = await newPage()
    await signIn(page, `#/projects/${projectId}`)
    await page.fill('input[name=title][aria-label="Knowledge title"]', 'Short note')
    await page.fill('textarea[name=text]', 'One short paragraph.')
    await page.click('button >> text=Add knowledge')
    const ready = page.locator('#knowledge li', { hasText: 'Short note' })
    await ready.locator('.ingest-ready').waitFor({ timeout: 30_000 })
    await expect(ready.innerText()).resolves.toMatch(/ready\s+1 chunk\b(?!s)/)
    await page.fill('input[name=title][aria-label="Knowledge title"]', 'Broken file')
    await page.setInputFiles('input[type=file]', {
      name: 'broken.pdf',
      mimeType: 'application/pdf',
      buffer: Buffer.from('this is not a PDF at all'),
    })
    await page.click('button >> text=Add knowledge')
    const broken = page.locator('#knowledge li', { hasText: 'Broken file' })
    await broken.locator('.ingest-failed').waitFor({ timeout: 30_000 })
    const items = await http(server.url, 'GET', `/api/projects/${projectId}/knowledge`, { token })
    const reason = items.body.items.find((item: { title: string }) => item.title === 'Broken file')
      .ingestError as string
    expect(reason).toBeTruthy()
    await expect(broken.locator('.ingest-error').innerText()).resolves.toBe(`Failed: ${reason}`)
    await shot(page, '16-knowledge-states')
    await page.close()
  })

  it('plinth/client runs in the page: typed calls, a run streamed with stream tickets, PlinthError codes', async () => {
    const page = await newPage()
    await signIn(page)
    const streamUrls: string[] = []
    page.on('request', (request) => {
      if (request.url().includes('/events'))
        streamUrls.push(`${request.method()} ${request.url()} ${request.headers().authorization ?? 'no-auth'}`)
    })
    // The same module the console imports, used as an app would (the page's import map finds its dependency).
    // A string, not a function: vitest would rewrite the dynamic import inside a function's source.
    const inPage = `(async (apiToken) => {
      const { createClient, PlinthError } = await import('/console/client/index.js')
      const client = createClient({ baseUrl: '', token: apiToken })
      const project = await client.projects.create({ name: 'From the page', defaultModel: 'decide' })
      const conversation = await client.conversations.create(project.id)
      const events = []
      let text = ''
      for await (const event of client.runs.start(conversation.id, { input: 'write it', approvalPolicy: 'dontAsk' })) {
        events.push(event.event)
        if (event.event === 'message.delta') text += event.data.text
      }
      const missing = await client.runs.get('01J00000000000000000000000').catch((error) => error)
      const runId = (await client.conversations.runs(conversation.id)).items[0].id
      const replayed = []
      for await (const event of client.runs.stream(runId)) replayed.push(event.event)
      return { events, text, replayed, missing: { isPlinthError: missing instanceof PlinthError, status: missing.status, code: missing.code } }
    })(${JSON.stringify(token)})`
    const result = (await page.evaluate(inPage)) as {
      events: string[]
      text: string
      replayed: string[]
      missing: unknown
    }
    expect(result.events[0]).toBe('run.created')
    expect(result.events.at(-1)).toBe('run.completed')
    expect(result.text).toBe('I will write it.The draft is written.')
    expect(result.replayed).toEqual(result.events)
    expect(result.missing).toEqual({ isPlinthError: true, status: 404, code: 'not_found' })
    // In a browser the run's stream was opened with a single-use ticket, never with the token.
    expect(streamUrls.some((line) => /GET .*\/api\/runs\/[^/]+\/events\?ticket=.* no-auth$/.test(line))).toBe(true)
    expect(streamUrls.every((line) => !line.includes(token))).toBe(true)
    await page.close()
  })

  it('pages conversations, knowledge and the audit beyond the newest 100', async () => {
    const projectId = await project('Many things', 'decide')
    const total = 103
    const conversationIds: string[] = []
    for (let index = 0; index < total; index += 10) {
      const batch = Array.from({ length: Math.min(10, total - index) }, (_, offset) => index + offset)
      await Promise.all(
        batch.map(async (n) => {
          const made = await http(server.url, 'POST', `/api/projects/${projectId}/conversations`, {
            token,
            body: { title: `c${n}` },
          })
          conversationIds.push(made.body.id)
          expect(
            (
              await http(server.url, 'POST', `/api/projects/${projectId}/knowledge`, {
                token,
                body: { title: `k${n}`, text: `note ${n}` },
              })
            ).status,
          ).toBe(201)
        }),
      )
    }
    const busy = conversationIds[0]!
    for (let n = 0; n < total; n++) {
      const answer = await http(server.url, 'PATCH', `/api/conversations/${busy}`, {
        token,
        body: { permissionMode: n % 2 === 0 ? 'risky' : 'manual' },
      })
      expect(answer.status).toBe(200)
    }
    const page = await newPage()
    await signIn(page, `#/projects/${projectId}`)
    for (const id of ['conversations', 'knowledge']) {
      const list = page.locator(`#${id} > li`)
      await expect.poll(() => list.count(), { timeout: 30_000 }).toBe(100)
      await page.locator(`#${id} + button.more`).click()
      await expect.poll(() => list.count(), { timeout: 30_000 }).toBe(total)
      await expect(page.locator(`#${id} + button.more`).isVisible()).resolves.toBe(false)
    }
    await page.goto(`${base}/console/#/conversations/${busy}`)
    await page.click('#audit-tab')
    const rows = page.locator('table.audit tbody tr')
    await expect.poll(() => rows.count(), { timeout: 30_000 }).toBe(100)
    await page.click('#audit button.more')
    await expect.poll(() => rows.count(), { timeout: 30_000 }).toBe(total)
    await page.close()
  })
})
