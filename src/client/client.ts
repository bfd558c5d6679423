import { errorFrom, PlinthError } from './errors.js'
import type { PlinthEvent, RunEvent } from './events.js'
import { follow, type StreamOptions } from './follow.js'
import { checkStream, Transport, type ClientOptions, type RawRequest } from './transport.js'
import type { Answer, Conversation, KnowledgeItem, Project, QueryOf, RequestBody, Run } from './types.js'

type Query = RawRequest['query']
const path = encodeURIComponent

/** A file to add to a project's knowledge (multipart upload). */
export interface KnowledgeFile {
  file: Blob
  /** The file name the server sees (its extension picks the parser: .txt .md .html .pdf .docx). */
  filename?: string
  title?: string
}

export interface WaitOptions {
  /** Give up after this long and answer the run as it is (default: until it settles). */
  timeoutMs?: number
  signal?: AbortSignal
}

function idempotencyKey(): string {
  const bytes = new Uint8Array(16)
  globalThis.crypto.getRandomValues(bytes)
  return `plinth-client-${Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('')}`
}

const settled = (run: Run): boolean =>
  run.status === 'requires_action' || ['completed', 'failed', 'cancelled', 'expired'].includes(run.status)

/**
 * `plinth/client`: the HTTP API as typed calls, and its event streams as async iterators that
 * reconnect by themselves. Works in Node 20 and in browsers. Every failure is a `PlinthError`.
 */
export function createClient(options: ClientOptions) {
  const http = new Transport(options)
  const get = <T>(route: string, query?: Query, signal?: AbortSignal): Promise<T> =>
    http.request<T>('GET', route, { ...(query && { query }), ...(signal && { signal }) })
  const send = <T>(
    method: 'POST' | 'PATCH' | 'DELETE',
    route: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<T> => http.request<T>(method, route, { ...(body !== undefined && { body }), ...(headers && { headers }) })
  const events = (route: string, streamOptions?: StreamOptions): AsyncGenerator<PlinthEvent, void, undefined> =>
    follow(http, { path: () => route, untilRunEnds: false }, streamOptions)

  const runs = {
    /** Posts a user message and starts a run. `wait` (seconds, ≤ 120) answers once it ends or needs action. */
    create: (
      conversationId: string,
      body: RequestBody<'createRun'>,
      createOptions: { wait?: number; idempotencyKey?: string } = {},
    ) =>
      send<Answer<'createRun'>>('POST', `/api/conversations/${path(conversationId)}/runs`, body, {
        ...(createOptions.wait !== undefined && { prefer: `wait=${Math.round(createOptions.wait)}` }),
        ...(createOptions.idempotencyKey !== undefined && { 'idempotency-key': createOptions.idempotencyKey }),
      }),
    /**
     * Posts a user message and follows the new run's events to its end (`POST …/runs` with Accept:
     * text/event-stream, then `GET /api/runs/:id/events` after a drop). The first event is `run.created`.
     * An Idempotency-Key makes a retried POST safe: a lost answer never starts a second run.
     */
    start: (
      conversationId: string,
      body: RequestBody<'createRun'>,
      streamOptions: StreamOptions = {},
    ): AsyncGenerator<RunEvent, void, undefined> => {
      let runId: string | null = null
      const key = idempotencyKey()
      const first = async (signal: AbortSignal): Promise<Response> => {
        const response = await http.fetch('POST', `/api/conversations/${path(conversationId)}/runs`, {
          body,
          signal,
          accept: 'text/event-stream',
          headers: { 'idempotency-key': key },
        })
        if (!response.ok) throw await errorFrom(response)
        checkStream(response, `/api/conversations/${conversationId}/runs`)
        return response
      }
      const plan = {
        path: () => (runId === null ? null : `/api/runs/${path(runId)}/events`),
        first,
        untilRunEnds: true,
        onEvent: (event: PlinthEvent) => {
          if (event.event === 'run.created') runId = event.data.run.id
        },
      }
      return follow(http, plan, streamOptions) as AsyncGenerator<RunEvent, void, undefined>
    },
    get: (runId: string) => get<Answer<'getRun'>>(`/api/runs/${path(runId)}`),
    /** The caller's runs, newest first (`status: 'requires_action'` for what waits on them). */
    list: (query: QueryOf<'listRuns'> = {}) => get<Answer<'listRuns'>>('/api/runs', query),
    /** Waits until the run ends or needs action (server-side long polls, `Prefer: wait`); then the run. */
    wait: async (runId: string, waitOptions: WaitOptions = {}): Promise<Run> => {
      const deadline =
        waitOptions.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + waitOptions.timeoutMs
      for (let gatewayErrors = 0; ;) {
        // 50 s a request: under the idle timeout of common proxies (60 s).
        const seconds = Math.max(0, Math.min(50, Math.ceil((deadline - Date.now()) / 1000)))
        let run: Run
        try {
          run = await http.request<Run>('GET', `/api/runs/${path(runId)}`, {
            ...(seconds > 0 && { headers: { prefer: `wait=${seconds}` } }),
            ...(waitOptions.signal && { signal: waitOptions.signal }),
          })
        } catch (error) {
          // A proxy that gave up on the long poll, or a restart: ask again (a few times in a row).
          if (
            !(error instanceof PlinthError && [0, 502, 503, 504].includes(error.status)) ||
            ++gatewayErrors > 5 ||
            Date.now() >= deadline
          )
            throw error
          continue
        }
        gatewayErrors = 0
        if (settled(run) || Date.now() >= deadline) return run
      }
    },
    /** The run's events from the start (or after `after`) until its terminal event. */
    stream: (runId: string, streamOptions?: StreamOptions): AsyncGenerator<RunEvent, void, undefined> =>
      follow(
        http,
        { path: () => `/api/runs/${path(runId)}/events`, untilRunEnds: true },
        streamOptions,
      ) as AsyncGenerator<RunEvent, void, undefined>,
    cancel: (runId: string) => send<Answer<'cancelRun'>>('POST', `/api/runs/${path(runId)}/cancel`),
    /** Resumes a run that failed upstream or was interrupted, from its last checkpoint. */
    resume: (runId: string) => send<Answer<'resumeRun'>>('POST', `/api/runs/${path(runId)}/resume`),
  }

  return {
    /** Who the token belongs to. */
    me: () => get<Answer<'getMe'>>('/api/me'),
    /** The configured models, a page at a time (`limit` ≤ 200, `cursor`: the previous page's `nextCursor`). */
    models: (query: QueryOf<'listModels'> = {}) => get<Answer<'listModels'>>('/api/models', query),
    projects: {
      list: (query: QueryOf<'listProjects'> = {}) => get<Answer<'listProjects'>>('/api/projects', query),
      create: (body: RequestBody<'createProject'>) => send<Project>('POST', '/api/projects', body),
      get: (projectId: string) => get<Project>(`/api/projects/${path(projectId)}`),
      update: (projectId: string, body: RequestBody<'updateProject'>) =>
        send<Project>('PATCH', `/api/projects/${path(projectId)}`, body),
      delete: (projectId: string) => send<void>('DELETE', `/api/projects/${path(projectId)}`),
      /** The project's events (its conversations, runs, knowledge), live, reconnecting; never ends by itself. */
      events: (projectId: string, streamOptions?: StreamOptions) =>
        events(`/api/projects/${path(projectId)}/events`, streamOptions),
    },
    conversations: {
      list: (projectId: string, query: QueryOf<'listProjectConversations'> = {}) =>
        get<Answer<'listProjectConversations'>>(`/api/projects/${path(projectId)}/conversations`, query),
      create: (projectId: string, body: RequestBody<'createConversation'> = {}) =>
        send<Conversation>('POST', `/api/projects/${path(projectId)}/conversations`, body),
      get: (conversationId: string) => get<Answer<'getConversation'>>(`/api/conversations/${path(conversationId)}`),
      update: (conversationId: string, body: RequestBody<'updateConversation'>) =>
        send<Answer<'updateConversation'>>('PATCH', `/api/conversations/${path(conversationId)}`, body),
      delete: (conversationId: string) => send<void>('DELETE', `/api/conversations/${path(conversationId)}`),
      messages: (conversationId: string, query: QueryOf<'listMessages'> = {}) =>
        get<Answer<'listMessages'>>(`/api/conversations/${path(conversationId)}/messages`, query),
      runs: (conversationId: string, query: QueryOf<'listConversationRuns'> = {}) =>
        get<Answer<'listConversationRuns'>>(`/api/conversations/${path(conversationId)}/runs`, query),
      /** The conversation's events, live, reconnecting; never ends by itself. */
      events: (conversationId: string, streamOptions?: StreamOptions) =>
        events(`/api/conversations/${path(conversationId)}/events`, streamOptions),
    },
    runs,
    decisions: {
      /** Decisions waiting for the caller (or answered: see the query's `status`). */
      list: (query: QueryOf<'listDecisions'> = {}) => get<Answer<'listDecisions'>>('/api/decisions', query),
      get: (decisionId: string) => get<Answer<'getDecision'>>(`/api/decisions/${path(decisionId)}`),
      /** `approve`, `approve_session` or `reject` (with an optional note). */
      answer: (decisionId: string, body: RequestBody<'decide'>) =>
        send<Answer<'decide'>>('POST', `/api/decisions/${path(decisionId)}`, body),
    },
    toolOutputs: {
      /** Results of the client-side tool calls the run waits for (`requiredAction.toolOutputs`). */
      submit: (runId: string, outputs: RequestBody<'submitToolOutputs'>['outputs']) =>
        send<Run>('POST', `/api/runs/${path(runId)}/tool-outputs`, { outputs }),
    },
    knowledge: {
      list: (projectId: string, query: QueryOf<'listKnowledge'> = {}) =>
        get<Answer<'listKnowledge'>>(`/api/projects/${path(projectId)}/knowledge`, query),
      /** Adds a text (`{title, text}`) or uploads a file; the item is `ready` at once or ingests in the background (`status`). */
      upload: (projectId: string, input: RequestBody<'addKnowledge'> | KnowledgeFile) => {
        if (!('file' in input)) return send<KnowledgeItem>('POST', `/api/projects/${path(projectId)}/knowledge`, input)
        const form = new FormData()
        if (input.title !== undefined) form.set('title', input.title)
        form.set('file', input.file, input.filename ?? ((input.file as { name?: string }).name || 'upload.txt'))
        return send<KnowledgeItem>('POST', `/api/projects/${path(projectId)}/knowledge`, form)
      },
      get: (knowledgeId: string) => get<KnowledgeItem>(`/api/knowledge/${path(knowledgeId)}`),
      delete: (knowledgeId: string) => send<void>('DELETE', `/api/knowledge/${path(knowledgeId)}`),
    },
    /** Hybrid search over one project's knowledge (`projectId`), or over every project the caller can read. */
    search: (query: QueryOf<'searchAll'> & { projectId?: string }) => {
      const { projectId, ...rest } = query
      return get<Answer<'searchAll'>>(
        projectId === undefined ? '/api/search' : `/api/projects/${path(projectId)}/search`,
        rest,
      )
    },
    commands: {
      list: () => get<Answer<'listCommands'>>('/api/commands'),
      /** Runs a command through the bus; `status: 'awaiting_decision'` when a person must approve it first. */
      dispatch: (commandId: string, body: RequestBody<'dispatchCommand'>) =>
        send<Answer<'dispatchCommand'>>('POST', `/api/commands/${path(commandId)}`, body),
    },
    /** Any route by path, for what has no typed call: the parsed JSON answer. */
    request: <T = unknown>(method: string, route: string, requestOptions?: RawRequest) =>
      http.request<T>(method, route, requestOptions),
    /** Any event stream by path (`untilRunEnds` for a run's); with stream tickets, only /api/runs|conversations|projects/<id>/events. */
    stream: (route: string, streamOptions: StreamOptions & { untilRunEnds?: boolean } = {}) =>
      follow(http, { path: () => route, untilRunEnds: streamOptions.untilRunEnds ?? false }, streamOptions),
  }
}

export type PlinthClient = ReturnType<typeof createClient>
