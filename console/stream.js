// Browser streaming without a token in any URL: each connection asks for a single-use stream ticket
// (POST /api/stream-tickets, with the header) and opens an EventSource with it and ?after=<last id>.
// A dropped connection is reopened the same way, so nothing is duplicated or missed.
const eventTypes = [
  'run.created', 'run.status', 'round.started', 'message.created', 'message.delta', 'message.completed',
  'tool_call.created', 'tool_call.started', 'tool_call.output', 'tool_call.completed',
  'decision.required', 'decision.resolved', 'knowledge.injected',
  'run.completed', 'run.failed', 'run.cancelled', 'run.expired',
  'conversation.updated', 'conversation.deleted',
]
const terminal = new Set(['run.completed', 'run.failed', 'run.cancelled', 'run.expired'])

/**
 * Follows one event stream. `onEvent(type, data, id)` gets each event once, in order; `onState`
 * gets 'connecting' | 'live' | 'reconnecting' | 'ended' | 'revoked'. A run stream ends itself after
 * the run's terminal event. Returns `close()`.
 */
export function follow(api, path, { after = 0, onEvent, onState = () => {} }) {
  let lastId = after
  let source = null
  let closed = false
  let attempt = 0
  let timer = null

  const stop = (state) => {
    closed = true
    clearTimeout(timer)
    source?.close()
    onState(state)
  }
  const retry = () => {
    source?.close()
    source = null
    if (closed) return
    onState('reconnecting')
    // Backoff with jitter: 0.5 s, 1 s, 2 s … up to 10 s.
    const delay = Math.min(10_000, 500 * 2 ** attempt) * (0.75 + Math.random() / 2)
    attempt++
    timer = setTimeout(connect, delay)
  }
  const connect = async () => {
    if (closed) return
    onState(attempt === 0 ? 'connecting' : 'reconnecting')
    let ticket
    try {
      ticket = await api.post('/api/stream-tickets', { path })
    } catch (error) {
      if (error.status === 401) return stop('revoked')
      if (error.status === 404 || error.status === 403) return stop('ended')
      return retry()
    }
    if (closed) return
    const es = new EventSource(`${ticket.url}&after=${lastId}`)
    source = es
    es.onopen = () => {
      attempt = 0
      onState('live')
    }
    // EventSource would reconnect with the same (now used) ticket: take over instead.
    es.onerror = () => {
      if (source === es) retry()
    }
    const handle = (type) => (message) => {
      const id = Number(message.lastEventId)
      if (id && id <= lastId) return
      if (id) lastId = id
      let data = null
      try {
        data = JSON.parse(message.data)
      } catch {
        return
      }
      onEvent(type, data, id)
      if (terminal.has(type) && path.startsWith('/api/runs/')) stop('ended')
    }
    for (const type of eventTypes) es.addEventListener(type, handle(type))
    es.addEventListener('access_revoked', () => stop('revoked'))
    es.addEventListener('reconnect', () => retry())
    es.addEventListener('shutdown', () => retry())
  }
  connect()
  return { close: () => stop('closed'), get lastId() { return lastId } }
}
