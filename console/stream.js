// Follows one event stream through plinth/client's reader: single-use stream tickets (no token in
// any URL), reconnects with the last event id and backoff, each event once and in order.

/**
 * `onEvent(type, data, id)` gets each event once, in order; `onState` gets 'connecting' | 'live' |
 * 'reconnecting' | 'ended' | 'revoked' | 'closed'. A run stream ends after the run's terminal event.
 * Returns `close()`.
 */
export function follow(api, path, { after = 0, onEvent, onState = () => {} }) {
  const controller = new AbortController()
  let lastId = after
  const read = async () => {
    const events = api.client.stream(path, {
      after,
      untilRunEnds: path.startsWith('/api/runs/'),
      signal: controller.signal,
      onState: (state) => onState(state),
    })
    for await (const event of events) {
      const id = Number(event.id)
      if (id) lastId = id
      // A view that fails on one event must not end the stream (the run goes on).
      try {
        onEvent(event.event, event.data, id)
      } catch (error) {
        console.error('the console could not show an event', event.event, error)
      }
    }
  }
  read().then(
    () => controller.signal.aborted || onState('ended'),
    (error) => {
      if (controller.signal.aborted) return
      onState(error.code === 'access_revoked' || error.status === 401 ? 'revoked' : 'ended')
      // The token itself is gone (a ticket request answered 401): sign out, as every other call does.
      if (error.status === 401) api.onUnauthorized?.(error)
    },
  )
  return {
    close: () => {
      controller.abort()
      onState('closed')
    },
    get lastId() {
      return lastId
    },
  }
}
