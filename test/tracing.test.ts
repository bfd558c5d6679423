import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { http, lastLine, runPlinth, startServe, type ServeProcess } from './helpers/cli-process.js'
import {
  openaiTextChunks,
  openaiToolCallChunks,
  startFakeUpstream,
  type FakeUpstream,
} from './helpers/fake-upstream.js'
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from './helpers/otlp-receiver.js'
import { waitFor, waitForRun } from './helpers/waits.js'
import { WebhookReceiver } from './helpers/webhook-receiver.js'

// OpenTelemetry (docs/guides/operating.md#tracing): a real `plinth serve` exporting OTLP/HTTP JSON to a
// receiver in the test, a model upstream speaking the chat-completions wire format.
describe('OpenTelemetry traces and metrics', () => {
  const apiKey = `sk-trace-${randomBytes(12).toString('hex')}`
  let cwd: string
  let receiver: OtlpReceiver
  let upstream: FakeUpstream
  let server: ServeProcess
  let token: string
  const servers: ServeProcess[] = []
  const receivers: WebhookReceiver[] = []

  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-otel-'))
    receiver = await startOtlpReceiver()
    upstream = await startFakeUpstream()
    await writeFile(join(cwd, 'echo.json'), JSON.stringify({ turns: [{ text: 'echo' }] }))
    await writeFile(
      join(cwd, 'plinth.config.json'),
      JSON.stringify({
        plugins: ['rdm'],
        models: [
          { id: 'gpt', provider: 'openai', model: 'gpt-test', baseUrl: `${upstream.url}/v1`, apiKeyEnv: 'TRACE_KEY' },
          { id: 'echo', provider: 'scripted', script: 'echo.json' },
        ],
        defaultModel: 'gpt',
      }),
    )
    token = lastLine((await runPlinth(['users', 'create', 'tracer'], { cwd })).stdout)
    server = await startServe({
      cwd,
      env: {
        TRACE_KEY: apiKey,
        PLINTH_EXEC_BACKEND: 'direct',
        PLINTH_WEBHOOK_ALLOW_PRIVATE: '1',
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_SERVICE_NAME: 'plinth-traced',
        OTEL_BSP_SCHEDULE_DELAY: '50',
        OTEL_METRIC_EXPORT_INTERVAL: '300',
      },
    })
    servers.push(server)
  }, 180_000)
  /** A data directory of its own (the embedded database is one process's) with a scripted model and a user. */
  const echoServerDir = async (name: string) => {
    const own = join(cwd, name)
    await mkdir(own)
    await writeFile(join(own, 'echo.json'), JSON.stringify({ turns: [{ text: 'echo' }] }))
    await writeFile(
      join(own, 'plinth.config.json'),
      JSON.stringify({ models: [{ id: 'echo', provider: 'scripted', script: 'echo.json' }], defaultModel: 'echo' }),
    )
    const token = lastLine((await runPlinth(['users', 'create', name], { cwd: own })).stdout)
    return { own, token }
  }
  afterAll(async () => {
    for (const each of servers) await each.kill()
    for (const each of receivers) await each.close()
    await receiver?.close()
    await upstream?.close()
    await rm(cwd, { recursive: true, force: true })
  })

  it(
    "a run's spans reach the collector under the caller's trace: request, invoke_agent, chat, execute_tool",
    { timeout: 120_000 },
    async () => {
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([{ id: 'call_ping', name: 'rdm__ping', arguments: '{"target":"Paris"}' }]),
      })
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('All done in Paris.', 4) })
      const project = await http(server.url, 'POST', '/api/projects', { token, body: { name: 'traced' } })
      const hooks = await new WebhookReceiver().listen()
      receivers.push(hooks)
      const webhook = await http(server.url, 'POST', `/api/projects/${project.body.id}/webhooks`, {
        token,
        body: { url: hooks.url(), events: ['run.completed'] },
      })
      expect(webhook.status).toBe(201)
      const conversation = await http(server.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
        token,
        body: {},
      })
      const traceId = randomBytes(16).toString('hex')
      const callerSpanId = randomBytes(8).toString('hex')
      const started = await fetch(`${server.url}/api/conversations/${conversation.body.id}/runs`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          traceparent: `00-${traceId}-${callerSpanId}-01`,
        },
        body: JSON.stringify({ input: 'What is the weather in Paris? secret-prompt-words' }),
      })
      expect(started.status).toBe(201)
      const runId = ((await started.json()) as { id: string }).id
      const run = await waitForRun(server.url, token, runId, ['completed', 'failed', 'requires_action'], 60_000)
      expect(run).toMatchObject({ status: 'completed', iteration: 2 })

      const inTrace = () => receiver.spans.filter((span) => span.traceId === traceId)
      const named = (name: string) => inTrace().filter((span) => span.name === name)
      await waitFor(() => named('invoke_agent').length === 1 && named('chat gpt').length === 2, {
        timeoutMs: 30_000,
        what: () =>
          `the run spans (${inTrace()
            .map((span) => span.name)
            .join(', ')})`,
      })
      const byId = new Map(inTrace().map((span) => [span.spanId, span]))
      const parentOf = (span: ReceivedSpan) => byId.get(span.parentSpanId)

      // The HTTP server span continues the caller's trace.
      const request = inTrace().find((span) => span.name === 'POST /api/conversations/:id/runs')
      expect(
        request,
        inTrace()
          .map((span) => span.name)
          .join(', '),
      ).toBeDefined()
      expect(request!.parentSpanId).toBe(callerSpanId)
      expect(request!.kind).toBe(2) // SERVER
      expect(request!.attributes['http.response.status_code']).toBe(201)
      expect(request!.resource['service.name']).toBe('plinth-traced')

      const agent = named('invoke_agent')[0]!
      expect(parentOf(agent)).toBe(request)
      expect(agent.attributes).toMatchObject({
        'gen_ai.operation.name': 'invoke_agent',
        'plinth.run.id': runId,
        'gen_ai.conversation.id': conversation.body.id,
      })

      const chats = named('chat gpt')
      expect(chats).toHaveLength(2)
      for (const chat of chats) {
        expect(parentOf(chat)).toBe(agent)
        expect(chat.kind).toBe(3) // CLIENT
        expect(chat.attributes).toMatchObject({
          'gen_ai.operation.name': 'chat',
          'gen_ai.provider.name': 'openai',
          'gen_ai.request.model': 'gpt',
        })
      }
      const [first, second] = chats.sort(
        (a, b) => Number(a.attributes['plinth.run.iteration']) - Number(b.attributes['plinth.run.iteration']),
      )
      expect(first!.attributes).toMatchObject({
        'gen_ai.usage.input_tokens': 20,
        'gen_ai.usage.output_tokens': 12,
        'gen_ai.response.finish_reasons': ['tool_calls'],
      })
      expect(second!.attributes).toMatchObject({
        'gen_ai.usage.input_tokens': 10,
        'gen_ai.usage.output_tokens': 5,
        'gen_ai.response.finish_reasons': ['stop'],
      })
      // Each model request carried its chat span's traceparent upstream.
      const sent = upstream.requests.slice(-2).map((request) => request.headers.traceparent)
      expect(sent).toEqual(chats.map((chat) => `00-${traceId}-${chat.spanId}-01`))

      const ping = named('execute_tool rdm__ping')[0]
      expect(
        ping,
        inTrace()
          .map((span) => span.name)
          .join(', '),
      ).toBeDefined()
      expect(parentOf(ping!)).toBe(agent)
      expect(ping!.attributes).toMatchObject({
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': 'rdm__ping',
        'gen_ai.tool.call.id': 'call_ping',
        'plinth.dispatch.status': 'succeeded',
      })
      expect(ping!.attributes['plinth.dispatch.id']).toMatch(/^[0-9A-Z]{26}$/)
      expect(ping!.attributes['plinth.audit.hash']).toMatch(/^[0-9a-f]{64}$/)
      // The dispatch the span names is the run's ping, in the audit log.
      const audit = await http(server.url, 'GET', `/api/audit?limit=100`, { token })
      expect(JSON.stringify(audit.body)).toContain(String(ping!.attributes['plinth.dispatch.id']))

      // The run.completed webhook continues the run's trace: its delivery span, and the traceparent it sends.
      const delivered = await waitFor(() => hooks.received[0], { timeoutMs: 30_000, what: 'the webhook' })
      const deliverySpan = await waitFor(() => inTrace().find((span) => span.attributes['plinth.webhook'] === true), {
        timeoutMs: 30_000,
        what: 'the delivery span',
      })
      expect(deliverySpan.kind).toBe(3) // CLIENT
      expect(deliverySpan.attributes['http.response.status_code']).toBe(200)
      expect(delivered.headers.traceparent).toBe(`00-${traceId}-${deliverySpan.spanId}-01`)
      expect(deliverySpan.parentSpanId).toBe(agent.spanId)

      // Nothing secret, and no prompt or completion without the opt-in.
      const everything = receiver.raw.join('\n')
      expect(everything).not.toContain(apiKey)
      expect(everything).not.toContain(token)
      expect(everything).not.toContain('secret-prompt-words')
      expect(everything).not.toContain('All done in Paris')
    },
  )

  it(
    'an approved execution is traced under the approving request: exec, then the run driven on',
    { timeout: 120_000 },
    async () => {
      upstream.enqueue({
        kind: 'openai-stream',
        chunks: openaiToolCallChunks([
          { id: 'call_code', name: 'run_code', arguments: '{"language":"bash","code":"echo traced"}' },
        ]),
      })
      upstream.enqueue({ kind: 'openai-stream', chunks: openaiTextChunks('Ran it.', 2) })
      const project = await http(server.url, 'POST', '/api/projects', { token, body: { name: 'approved' } })
      const conversation = await http(server.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
        token,
        body: {},
      })
      const started = await http(server.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, {
        token,
        body: { input: 'run something' },
      })
      const waiting = await waitForRun(server.url, token, started.body.id, ['requires_action', 'failed', 'completed'])
      expect(waiting.status).toBe('requires_action')
      const decisionId = (waiting.requiredAction as { decisions: Array<{ decisionId: string }> }).decisions[0]!
        .decisionId
      const traceId = randomBytes(16).toString('hex')
      const callerSpanId = randomBytes(8).toString('hex')
      const approved = await fetch(`${server.url}/api/decisions/${decisionId}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          traceparent: `00-${traceId}-${callerSpanId}-01`,
        },
        body: JSON.stringify({ decision: 'approve' }),
      })
      expect(approved.status).toBe(200)
      expect(await waitForRun(server.url, token, started.body.id, ['completed', 'failed'], 60_000)).toMatchObject({
        status: 'completed',
      })
      const inTrace = () => receiver.spans.filter((span) => span.traceId === traceId)
      await waitFor(() => inTrace().some((span) => span.name === 'invoke_agent'), {
        timeoutMs: 30_000,
        what: () =>
          `the approval's spans (${inTrace()
            .map((span) => span.name)
            .join(', ')})`,
      })
      const byId = new Map(inTrace().map((span) => [span.spanId, span]))
      const request = inTrace().find((span) => span.name === 'POST /api/decisions/:id')!
      expect(request.parentSpanId).toBe(callerSpanId)
      const descends = (span: ReceivedSpan): boolean => {
        for (let at: ReceivedSpan | undefined = span; at; at = byId.get(at.parentSpanId))
          if (at === request) return true
        return false
      }
      const exec = inTrace().find((span) => span.name === 'exec')
      expect(
        exec,
        inTrace()
          .map((span) => span.name)
          .join(', '),
      ).toBeDefined()
      expect(descends(exec!)).toBe(true)
      expect(exec!.attributes).toMatchObject({ 'plinth.exec.backend': 'direct', 'process.exit.code': 0 })
      // The run goes on from the answer: its next drive is in the same trace.
      const agent = inTrace().find((span) => span.name === 'invoke_agent')!
      expect(descends(agent)).toBe(true)
      expect(inTrace().some((span) => span.name === 'chat gpt' && span.parentSpanId === agent.spanId)).toBe(true)
    },
  )

  it('exports the GenAI client metrics: token usage by type and operation duration', { timeout: 60_000 }, async () => {
    await waitFor(
      () =>
        receiver.metrics.some((metric) => metric.name === 'gen_ai.client.token.usage') &&
        receiver.metrics.some((metric) => metric.name === 'gen_ai.client.operation.duration'),
      { timeoutMs: 30_000, what: 'the GenAI metrics' },
    )
    const usage = receiver.metrics.filter((metric) => metric.name === 'gen_ai.client.token.usage').at(-1)!
    expect(usage.points).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ 'gen_ai.token.type': 'input', 'gen_ai.request.model': 'gpt' }),
        expect.objectContaining({ 'gen_ai.token.type': 'output', 'gen_ai.request.model': 'gpt' }),
      ]),
    )
  })

  it(
    'prompts and completions are recorded only on opt-in, scrubbed of secrets like log lines',
    { timeout: 120_000 },
    async () => {
      const { own, token } = await echoServerDir('content')
      const capturing = await startServe({
        cwd: own,
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_SERVICE_NAME: 'plinth-content',
          OTEL_BSP_SCHEDULE_DELAY: '50',
          OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
        },
      })
      servers.push(capturing)
      const key = `sk-${randomBytes(12).toString('hex')}`
      const project = await http(capturing.url, 'POST', '/api/projects', { token, body: { name: 'content' } })
      const conversation = await http(capturing.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
        token,
        body: {},
      })
      const run = await http(capturing.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, {
        token,
        body: { input: `remember the launch word, and my key ${key}` },
      })
      await waitForRun(capturing.url, token, run.body.id, ['completed', 'failed'], 30_000)
      const chat = await waitFor(
        () =>
          receiver.spans.find(
            (span) => span.resource['service.name'] === 'plinth-content' && span.name === 'chat echo',
          ),
        { timeoutMs: 30_000, what: 'the chat span' },
      )
      expect(String(chat.attributes['gen_ai.input.messages'])).toContain('remember the launch word')
      expect(String(chat.attributes['gen_ai.input.messages'])).toContain('sk-[redacted]')
      expect(chat.attributes['gen_ai.output.messages']).toBe('echo')
      expect(receiver.raw.join('\n')).not.toContain(key)
      expect(receiver.raw.join('\n')).not.toContain(token)
    },
  )

  it(
    'a collector that is down changes nothing for runs: the run completes, a warning says so',
    { timeout: 120_000 },
    async () => {
      const closed = await startOtlpReceiver()
      const deadUrl = closed.url
      await closed.close()
      const { own, token } = await echoServerDir('down')
      const down = await startServe({
        cwd: own,
        env: {
          TRACE_KEY: apiKey,
          OTEL_EXPORTER_OTLP_ENDPOINT: deadUrl,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_BSP_SCHEDULE_DELAY: '50',
          OTEL_TRACES_SAMPLER: 'not-a-sampler',
        },
      })
      servers.push(down)
      expect(down.stdout()).toContain('OTEL_TRACES_SAMPLER=not-a-sampler is not supported')
      const project = await http(down.url, 'POST', '/api/projects', { token, body: { name: 'untraced' } })
      const conversation = await http(down.url, 'POST', `/api/projects/${project.body.id}/conversations`, {
        token,
        body: {},
      })
      const run = await http(down.url, 'POST', `/api/conversations/${conversation.body.id}/runs`, {
        token,
        body: { input: 'hello', model: 'echo' },
      })
      expect(run.status).toBe(201)
      expect(await waitForRun(down.url, token, run.body.id, ['completed', 'failed'], 30_000)).toMatchObject({
        status: 'completed',
      })
      await waitFor(() => /"level":40.*opentelemetry/.test(down.stdout()), {
        timeoutMs: 30_000,
        what: 'a warning about the export',
      })
      expect(down.stdout()).not.toContain(apiKey)
    },
  )
})
