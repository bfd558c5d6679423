// `plinth/client`: a typed client for Plinth's HTTP API and event streams (docs/client.md).
export { createClient, type KnowledgeFile, type PlinthClient, type WaitOptions } from './client.js'
export { PlinthError, type Problem } from './errors.js'
export type {
  EventData,
  PlinthEvent,
  PluginEvent,
  PlinthEventName,
  RunEvent,
  StreamState,
  StreamStateInfo,
} from './events.js'
export type { StreamOptions } from './follow.js'
export type { ClientOptions, RawRequest } from './transport.js'
export type {
  Answer,
  Conversation,
  Decision,
  KnowledgeItem,
  Message,
  Page,
  Project,
  QueryOf,
  RequestBody,
  RequiredAction,
  Run,
  Schemas,
  SearchHit,
} from './types.js'
