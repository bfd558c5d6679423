import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cliEnv, http, lastLine, plinthBin, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import { startFakeUpstream, type FakeUpstream } from './helpers/fake-upstream.js'

// `plinth chat` used as a person would: in a real terminal (tmux), typing, answering prompts, Ctrl-C.
const hasTmux = spawnSync('tmux', ['-V']).status === 0
const requireTmux = process.env.REQUIRE_TMUX === '1' || process.env.REQUIRE_BROWSER === '1'
if (!hasTmux && requireTmux) throw new Error('REQUIRE_TMUX=1 but tmux is not installed (apt-get install tmux)')
if (!hasTmux) console.warn('[plinth tests] skipping the plinth chat terminal tests: tmux is not installed')

const scripts = {
  propose: {
    turnBy: 'round',
    turns: [
      {
        text: 'Let me look.',
        toolCalls: [{ name: 'propose_command', arguments: { command: 'echo hello-from-local', reason: 'to see' } }],
      },
      { text: 'Seen it: all good.' },
    ],
  },
  danger: {
    turnBy: 'round',
    turns: [
      { toolCalls: [{ name: 'propose_command', arguments: { command: 'rm -rf /tmp/plinth-chat-never-exists' } }] },
      { text: 'Fine, I will not.' },
    ],
  },
  decide: {
    turnBy: 'round',
    turns: [
      { toolCalls: [{ name: 'rdm__draft__compose', arguments: { title: 'Memo', body: 'hello' } }] },
      { text: 'The draft is written.' },
    ],
  },
  slow: {
    turns: [{ text: Array.from({ length: 300 }, (_, index) => `w${index} `).join(''), chunks: 300, delayMs: 50 }],
  },
  other: { turns: [{ text: 'Answered by the other model.' }] },
  // Terminal control sequences from the model: colour, a window title, a screen clear, and a command
  // whose carriage return and line erase would paint a harmless one over what runs.
  hostile: {
    turnBy: 'round',
    turns: [
      {
        text: 'Normal \u001b[31mRED\u001b[0m text.\u001b]0;HIJACKED-TITLE\u0007 then \u001b[2J\u001b[Hcleared? ',
        toolCalls: [
          {
            name: 'propose_command',
            arguments: {
              command: 'touch plinth-chat-pwned #\u001b[2K\r  $ echo hello',
              reason: 'harmless\u009b greeting',
            },
          },
        ],
      },
      { text: 'Done.' },
    ],
  },
}

describe.skipIf(!hasTmux)('plinth chat in a terminal (tmux)', () => {
  let cwd: string
  let server: ServeProcess
  let token: string
  let upstream: FakeUpstream
  const sessions: string[] = []

  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-chat-'))
    upstream = await startFakeUpstream()
    for (const [name, script] of Object.entries(scripts))
      await writeFile(join(cwd, `${name}.json`), JSON.stringify(script))
    const broken = { id: 'broken', provider: 'openai', baseUrl: upstream.url, model: 'gpt-x' }
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        plugins: ['rdm'],
        models: [...Object.keys(scripts).map((id) => ({ id, provider: 'scripted', script: `${id}.json` })), broken],
        defaultModel: 'propose',
      }),
    )
    token = lastLine((await runPlinth(['users', 'create', 'chatter'], { cwd })).stdout)
    server = await startServe({ cwd })
  }, 120_000)
  afterAll(async () => {
    for (const session of sessions) spawnSync('tmux', ['kill-session', '-t', session])
    await server?.kill()
    await upstream?.close()
    if (cwd) await rm(cwd, { recursive: true, force: true })
  })

  /** A project whose runs use `model`, and `plinth chat` on it in a new tmux session. */
  const open = async (
    model: keyof typeof scripts | 'broken',
    extraArgs = '',
  ): Promise<{ session: string; projectId: string }> => {
    const project = await http(server.url, 'POST', '/api/projects', {
      token,
      body: { name: `chat-${model}-${Date.now()}`, defaultModel: model },
    })
    expect(project.status).toBe(201)
    const session = `plinth-chat-${process.pid}-${sessions.length}`
    sessions.push(session)
    const env = cliEnv({ PLINTH_URL: server.url, PLINTH_TOKEN: token, NO_COLOR: '1' })
    const exports = ['PLINTH_URL', 'PLINTH_TOKEN', 'NO_COLOR', 'PLINTH_FROM_SOURCE']
      .map((name) => `${name}=${JSON.stringify(env[name] ?? '')}`)
      .join(' ')
    execFileSync('tmux', [
      'new-session',
      '-d',
      '-s',
      session,
      '-x',
      '140',
      '-y',
      '50',
      `cd ${JSON.stringify(cwd)} && ${exports} ${JSON.stringify(process.execPath)} ${JSON.stringify(plinthBin)} chat --project ${project.body.id} ${extraArgs}; echo "[exit $?]"; sleep 600`,
    ])
    await screenShows(session, /you>/)
    return { session, projectId: project.body.id }
  }
  const type = (session: string, keys: string, enter = true): void => {
    execFileSync('tmux', ['send-keys', '-t', session, '-l', keys])
    if (enter) execFileSync('tmux', ['send-keys', '-t', session, 'Enter'])
  }
  const screen = (session: string): string =>
    execFileSync('tmux', ['capture-pane', '-p', '-t', session, '-S', '-200']).toString()
  const screenShows = async (session: string, pattern: RegExp, timeoutMs = 20_000): Promise<string> => {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const text = screen(session)
      if (pattern.test(text)) return text
      if (Date.now() > deadline) throw new Error(`the terminal never showed ${pattern}:\n${text}`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  const lastRun = async (projectId: string): Promise<{ id: string; status: string }> => {
    const conversations = await http(server.url, 'GET', `/api/projects/${projectId}/conversations`, { token })
    const runs = await http(server.url, 'GET', `/api/conversations/${conversations.body.items[0].id}/runs`, { token })
    return runs.body.items[0]
  }
  const clientOutput = async (runId: string): Promise<unknown> => {
    const events = await http(server.url, 'GET', `/api/runs/${runId}`, { token })
    expect(events.status).toBe(200)
    const audit = await http(server.url, 'GET', `/api/audit?commandId=propose_command`, { token })
    return audit.body.items.find((item: { runId: string }) => item.runId === runId)?.result
  }

  it('shows a proposed command with its risk, runs it here once approved, and the output reaches the model', async () => {
    const { session, projectId } = await open('propose')
    type(session, 'what is here?')
    await screenShows(session, /run it here\? \[y\/n\]/)
    expect(screen(session)).toMatch(/\$ echo hello-from-local/)
    expect(screen(session)).toMatch(/risk: (low|medium)/)
    type(session, 'y')
    const text = await screenShows(session, /agent> Seen it: all good\./)
    expect(text).toMatch(/\| hello-from-local/)
    const run = await lastRun(projectId)
    expect(run.status).toBe('completed')
    expect(await clientOutput(run.id)).toMatchObject({ accepted: true, exitCode: 0, output: 'hello-from-local\n' })
  })

  it('a declined command is not run, and the model is told so', async () => {
    const { session, projectId } = await open('propose')
    type(session, 'what is here?')
    await screenShows(session, /run it here\? \[y\/n\]/)
    type(session, 'n')
    await screenShows(session, /declined[\s\S]*agent> Seen it/)
    expect(screen(session)).not.toMatch(/\| hello-from-local/)
    const run = await lastRun(projectId)
    expect(await clientOutput(run.id)).toMatchObject({ accepted: false, rejected: true })
  })

  it('a high-risk command is shown as such with its rule and needs an explicit "yes" ("y" declines)', async () => {
    const { session, projectId } = await open('danger')
    type(session, 'clean up')
    const text = await screenShows(session, /HIGH RISK — type "yes"/)
    expect(text).toMatch(/risk: high — .*(recursive|delete|rm)/i)
    type(session, 'y')
    await screenShows(session, /declined[\s\S]*agent> Fine, I will not\./)
    expect(await clientOutput((await lastRun(projectId)).id)).toMatchObject({ accepted: false })
  })

  it('asks for a decision inline, showing its preview and risk; the arguments on request; approving lets the run finish', async () => {
    const { session, projectId } = await open('decide')
    type(session, 'write a memo')
    await screenShows(session, /approve\? \[y\] once, \[s\] for this session, \[n\] reject/)
    expect(screen(session)).toMatch(/rdm__draft__compose wants to run \(high risk\)/)
    expect(screen(session)).toMatch(/Write draft "Memo" \(5 chars\) into project chat-decide-/)
    expect(screen(session)).not.toMatch(/args:/)
    // A stray answer decides nothing: it is asked again.
    type(session, '{"title": "x"}')
    await screenShows(session, /answer y, s, n, e or r, or a for the arguments\n\s+approve\?/)
    expect((await lastRun(projectId)).status).toBe('requires_action')
    type(session, 'a')
    await screenShows(session, /approve\?.*\n\s+args: \{.*"body":"hello".*\}\n\s+approve\?/)
    type(session, 'y')
    await screenShows(session, /agent> The draft is written\./)
    expect((await lastRun(projectId)).status).toBe('completed')
  })

  it('piped input that runs dry at a decision ends the session, leaving the decision open', async () => {
    const project = await http(server.url, 'POST', '/api/projects', {
      token,
      body: { name: `chat-piped-${Date.now()}`, defaultModel: 'decide' },
    })
    const result = await runPlinth(['chat', '--url', server.url, '--token', token, '--project', project.body.id], {
      cwd,
      input: 'write a memo\n',
      env: { NO_COLOR: '1' },
      timeoutMs: 60_000,
    })
    // Ends by itself (it used to ask again for ever, at full CPU), with no answer taken for one.
    expect(result.signal).toBeNull()
    expect(result.stdout.match(/answer y, s, n, e or r/g) ?? []).toHaveLength(0)
    expect((await lastRun(project.body.id)).status).toBe('requires_action')
  })

  it('edits a decision’s arguments inline, or answers in its place; the model reads what happened', async () => {
    const { session, projectId } = await open('decide')
    type(session, 'write a memo')
    await screenShows(session, /\[e\] edit arguments, \[r\] respond instead/)
    type(session, 'e')
    await screenShows(session, /new arguments \(JSON\):/)
    // Refused by the command's schema: said, and the arguments asked for again (the decision itself
    // is not shown a second time).
    type(session, '{"title": "Memo", "body": "hello", "extra": 1}')
    await screenShows(session, /extra: unknown field\n.*empty answer goes back.*\n\s*new arguments \(JSON\):/)
    // Not JSON: said, and asked again.
    type(session, 'title=Memo')
    await screenShows(session, /not a JSON object; nothing sent.*\n\s*new arguments \(JSON\):/)
    type(session, '{"title": "Edited memo", "body": "hello"}')
    const screen = await screenShows(session, /agent> The draft is written\./)
    expect(screen.match(/wants to run/g)).toHaveLength(1)
    const run = await lastRun(projectId)
    expect(run.status).toBe('completed')
    const decisions = await http(server.url, 'GET', '/api/decisions?status=approved', { token })
    expect(decisions.body.items[0]).toMatchObject({ reply: { kind: 'edit', params: { title: 'Edited memo' } } })

    const second = await open('decide')
    type(second.session, 'write another memo')
    await screenShows(second.session, /\[r\] respond instead/)
    type(second.session, 'r')
    await screenShows(second.session, /your answer for the model:/)
    type(second.session, 'No memo today, thanks.')
    await screenShows(second.session, /agent> The draft is written\./)
    const rejected = await http(server.url, 'GET', '/api/decisions?status=rejected', { token })
    expect(rejected.body.items[0]).toMatchObject({ reply: { kind: 'respond', text: 'No memo today, thanks.' } })
  })

  it(
    'survives a server restart mid-run: reconnects with the last event id and shows the rest',
    { timeout: 120_000 },
    async () => {
      const { session, projectId } = await open('slow')
      type(session, 'talk for a while')
      await screenShows(session, /agent> w0 w1 w2/)
      // A graceful restart on the same port: the new server resumes the run, the client follows it.
      expect(await server.stop()).toBe(0)
      server = await startServe({ cwd, env: { PORT: String(server.port) } })
      await screenShows(session, /reconnecting in/)
      const text = await screenShows(session, /w299\s*\n(.*\n)*you>/, 60_000)
      // The answer cut off by the restart is marked as such, before it is made again.
      expect(text).toMatch(/agent> w0 .*\(interrupted\)\n(.*\n)*agent> w0 w1/)
      expect((await lastRun(projectId)).status).toBe('completed')
    },
  )

  it('Ctrl-C cancels the run; a second Ctrl-C quits', async () => {
    const { session, projectId } = await open('slow')
    type(session, 'talk for a while')
    await screenShows(session, /agent> w0 w1 w2/)
    execFileSync('tmux', ['send-keys', '-t', session, 'C-c'])
    await screenShows(session, /\(cancelled\)/)
    expect((await lastRun(projectId)).status).toBe('cancelled')
    await screenShows(session, /you>\s*$/m)
    execFileSync('tmux', ['send-keys', '-t', session, 'C-c'])
    await screenShows(session, /\[exit 130\]/)
  })

  it('Ctrl-C at a [y/n] prompt ends it at once and cancels the run (no Enter, nothing declined)', async () => {
    const { session, projectId } = await open('propose')
    type(session, 'what is here?')
    await screenShows(session, /run it here\? \[y\/n\]/)
    execFileSync('tmux', ['send-keys', '-t', session, 'C-c'])
    await screenShows(session, /\(cancelled\)[\s\S]*you>\s*$/)
    expect(screen(session)).not.toMatch(/declined/)
    expect((await lastRun(projectId)).status).toBe('cancelled')
  })

  it('Ctrl-C at a decision prompt ends it at once and cancels the run', async () => {
    const { session, projectId } = await open('decide')
    type(session, 'write a memo')
    await screenShows(session, /approve\? \[y\] once/)
    execFileSync('tmux', ['send-keys', '-t', session, 'C-c'])
    await screenShows(session, /\(cancelled\)[\s\S]*you>\s*$/)
    expect((await lastRun(projectId)).status).toBe('cancelled')
  })

  it('shows control characters from the model escaped, and never runs a command that holds them', async () => {
    const { session, projectId } = await open('hostile')
    type(session, 'say hi')
    const text = await screenShows(session, /agent> Done\./)
    // Nothing was cleared or retitled; every sequence is shown escaped.
    expect(text).toMatch(/you> say hi/)
    expect(text).toContain('Normal \\x1b[31mRED\\x1b[0m text.\\x1b]0;HIJACKED-TITLE\\x07 then \\x1b[2J\\x1b[Hcleared?')
    expect(execFileSync('tmux', ['display', '-p', '-t', session, '#{pane_title}']).toString()).not.toMatch(/HIJACKED/)
    expect(text).toContain('$ touch plinth-chat-pwned #\\x1b[2K\\r  $ echo hello')
    expect(text).toContain('why: harmless\\x9b greeting')
    expect(text).toMatch(/not run: the command holds control characters/)
    expect(text).not.toMatch(/run it here\?/)
    expect(existsSync(join(cwd, 'plinth-chat-pwned'))).toBe(false)
    expect(await clientOutput((await lastRun(projectId)).id)).toMatchObject({ accepted: false })
  })

  it('--model picks the model of the runs', async () => {
    const { session, projectId } = await open('propose', '--model other')
    type(session, 'who answers?')
    await screenShows(session, /agent> Answered by the other model\./)
    const run = await lastRun(projectId)
    expect(run).toMatchObject({ status: 'completed', model: 'other' })
  })

  it('a failed run shows its error code and message', async () => {
    upstream.enqueue({ kind: 'error', status: 400, body: { error: { message: 'this model is not available to you' } } })
    const { session } = await open('broken')
    type(session, 'hello?')
    await screenShows(session, /the run failed: upstream_error: .*this model is not available to you/)
  })
})

describe('plinth chat without a terminal', () => {
  let cwd: string
  let server: ServeProcess
  let token: string

  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-chat-once-'))
    await writeFile(join(cwd, 'answer.json'), JSON.stringify({ turns: [{ text: 'Forty-two.' }] }))
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        models: [{ id: 'answer', provider: 'scripted', script: 'answer.json' }],
        defaultModel: 'answer',
      }),
    )
    token = lastLine((await runPlinth(['users', 'create', 'once'], { cwd })).stdout)
    server = await startServe({ cwd })
  }, 120_000)
  afterAll(async () => {
    await server?.kill()
    if (cwd) await rm(cwd, { recursive: true, force: true })
  })

  it('--once prints the answer and exits 0', async () => {
    const result = await runPlinth(['chat', '--url', server.url, '--token', token, '--once', 'the answer?'], { cwd })
    expect(result.code, result.stderr).toBe(0)
    expect(result.stdout.trim()).toBe('Forty-two.')
  })

  it('a refused token is said plainly, once, and exits 1', async () => {
    const result = await runPlinth(['chat', '--url', server.url, '--token', 'plt_not-a-real-token', '--once', 'x'], {
      cwd,
    })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(/the token was refused/)
    expect(result.stderr.match(/refused/g)).toHaveLength(1)
  })

  it('a server that is down: says so and retries with backoff, then gives up with exit 1', async () => {
    const result = await runPlinth(['chat', '--url', 'http://127.0.0.1:9', '--token', token, '--once', 'x'], {
      cwd,
      timeoutMs: 60_000,
    })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(/cannot reach http:\/\/127\.0\.0\.1:9.*retrying sign in in 0\.5 s/)
    expect(result.stderr.match(/retrying/g)!.length).toBeGreaterThanOrEqual(3)
  })
})
