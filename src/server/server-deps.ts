import type { UploadSlots } from './upload-slots.js'
import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { CommandBus, ProjectAccess } from '../cmdbus/index.js'
import type { ExecService } from '../exec/index.js'
import type { McpHub } from '../mcp/index.js'
import type { Ingestor, KnowledgeService, Retriever } from '../rag/index.js'
import type { ConversationService, ProjectService, RunManager, RunQueries } from '../runmgr/index.js'
import type { Accounts, Store } from '../store/index.js'
import type { ScheduleService } from '../schedules/index.js'
import type { WebhookService } from '../webhooks/index.js'
import type { StreamRegistry } from './stream-registry.js'

/** What routes need from the composition root. */
export interface ServerDeps {
  store: Store
  /** Users, tokens, stream tickets. */
  accounts: Accounts
  bus: CommandBus
  access: ProjectAccess
  runs: RunManager
  /** Projects, conversations and runs as a caller sees them (access resolved; 404 for what they may not see). */
  projects: ProjectService
  conversations: ConversationService
  runQueries: RunQueries
  /** How long a `full` permission mode lasts. */
  fullModeTtlMs: number
  /** The currency of every cost (`currency`). */
  currency: string
  /** The server's secretKey: checks the signed checkpoints audit retention leaves. */
  auditKey?: string
  /** Aborted at shutdown so long-lived streams end cleanly. */
  shutdown: AbortSignal
  /** Open event streams: caps, lifetimes, access re-checks. */
  streams: StreamRegistry
  retriever: Retriever
  ingestor: Ingestor
  knowledge: KnowledgeService
  exec: ExecService
  /** Largest knowledge upload, bytes. */
  maxKnowledgeFileBytes: number
  /** Bytes of knowledge one user may hold (their items' sizes, deleted ones excluded). */
  maxKnowledgeBytesPerUser: number
  /** Uploads in flight (file PUTs, knowledge files), per user and in all. */
  uploads: UploadSlots
  /** Problems found at start that did not stop it; /readyz lists them. */
  startWarnings: string[]
  /** Problems that come and go (an MCP server that is down); /readyz lists them too. */
  liveWarnings?: () => string[]
  /** A project's webhook subscriptions and their delivery log. */
  webhooks: WebhookService
  schedules: ScheduleService
  /** Mounted MCP servers: per-user OAuth connections. */
  mcp?: Pick<McpHub, 'connections' | 'connect' | 'complete' | 'disconnect'>
}

/** The Fastify instance as routes see it: TypeBox schemas give request types. */
export type App = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>
