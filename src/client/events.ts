import type { components } from 'plinth/openapi'

type AnyStreamEvent = components['schemas']['StreamEvent'] | components['schemas']['RunStreamEvent']
type ControlName = 'access_revoked' | 'reconnect' | 'shutdown'

/** The events the document names (the catch-all for plugin events is typed below, by its prefix). */
type Named<E> = E extends { event: infer N } ? (string extends N ? never : E) : never
/** What a plugin emitted (`host.emit`): `plugin.<name>.<type>`, its data as the plugin sent it. */
export interface PluginEvent {
  event: `plugin.${string}`
  id: string
  data: unknown
}

/**
 * An event of a project, conversation or run stream: `{event, id, data}` as documented in the OpenAPI
 * document (`StreamEvent`). The stream's control frames (`reconnect`, `shutdown`, `access_revoked`)
 * are handled by the client and never reach the caller.
 */
export type PlinthEvent = Exclude<Named<AnyStreamEvent>, { event: ControlName }> | PluginEvent
/** The events of one run's stream (`RunStreamEvent`). */
export type RunEvent = Exclude<Named<components['schemas']['RunStreamEvent']>, { event: ControlName }>
export type PlinthEventName = PlinthEvent['event']
/** The data of one kind of event, e.g. `EventData<'message.delta'>` is `{messageId, text}`. */
export type EventData<Name extends PlinthEventName> = Name extends `plugin.${string}`
  ? unknown
  : Extract<PlinthEvent, { event: Name }>['data']

export const controlEvents: ReadonlySet<string> = new Set<ControlName>(['access_revoked', 'reconnect', 'shutdown'])
export const terminalRunEvents: ReadonlySet<string> = new Set([
  'run.completed',
  'run.failed',
  'run.cancelled',
  'run.expired',
])

/** The connection's state, for a status line: each (re)connect, then `live` once the server answered. */
export type StreamState = 'connecting' | 'live' | 'reconnecting'
export interface StreamStateInfo {
  /** Reconnect attempts since the stream was last live (0 on the first connect). */
  attempt: number
  /** How long the client waits before this attempt (ms; 0 when it connects at once). */
  delayMs: number
  /** The last event id received: the stream resumes after it. */
  lastEventId: string | null
  /** Why the connection was lost (`reconnecting` only). */
  error?: unknown
}
