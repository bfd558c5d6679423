import type { ProjectService } from '../runmgr/index.js'
import {
  deleteWebhook,
  getDelivery,
  getWebhook,
  getWebhookWithSecret,
  insertWebhook,
  listDeliveries,
  listWebhooks,
  newId,
  notFoundError,
  redeliverMessage,
  RequestError,
  rotateWebhookSecret,
  updateWebhook,
  type DeliveryRecord,
  type Executor,
  type Page,
  type PageRequest,
  type Store,
  type User,
  type WebhookEventType,
  type WebhookRecord,
} from '../store/index.js'
import { ipLiteral, nonPublicReason } from './address-policy.js'
import { webhookLimits, type WebhookSettings } from './settings.js'
import { newSecret } from './signature.js'

export interface WebhookInput {
  url: string
  events: WebhookEventType[]
  description?: string | null
}

export interface WebhookChange {
  url?: string
  events?: WebhookEventType[]
  description?: string | null
  enabled?: boolean
}

/** A subscription with its secret: the answer to a creation or a rotation, the only times it is shown. */
export type WebhookWithSecret = WebhookRecord & { secret: string }

/**
 * A project's webhook subscriptions, managed by its owner alone (members get 403, others 404, as for
 * deleting the project). URLs are checked here as far as they can be without resolving them: a URL,
 * http(s), no credentials, https and no private IP literal unless private addresses are allowed; the
 * address a name resolves to is checked when each delivery connects.
 */
export class WebhookService {
  readonly #store: Store
  readonly #projects: Pick<ProjectService, 'owned'>
  readonly #settings: Pick<WebhookSettings, 'allowPrivate' | 'secretGraceMs'>
  readonly #wake: () => void

  constructor(
    store: Store,
    projects: Pick<ProjectService, 'owned'>,
    settings: Pick<WebhookSettings, 'allowPrivate' | 'secretGraceMs'>,
    wake: () => void = () => undefined,
  ) {
    this.#store = store
    this.#projects = projects
    this.#settings = settings
    this.#wake = wake
  }

  async create(user: User, projectId: string, input: WebhookInput): Promise<WebhookWithSecret> {
    return (await this.prepare(user, projectId, input))(this.#store)
  }

  /**
   * The checks of a creation (the caller owns the project, the URL is allowed), then the insert to run
   * in `db` — the transaction an Idempotency-Key's record is written in.
   */
  async prepare(
    user: User,
    projectId: string,
    input: WebhookInput,
  ): Promise<(db: Executor) => Promise<WebhookWithSecret>> {
    const project = await this.#projects.owned(user, projectId)
    const url = checkWebhookUrl(input.url, this.#settings.allowPrivate)
    return (db) => this.#insert(user, project.id, url, input, db)
  }

  async #insert(
    user: User,
    projectId: string,
    url: string,
    input: WebhookInput,
    db: Executor,
  ): Promise<WebhookWithSecret> {
    const secret = newSecret()
    const webhook = await insertWebhook(
      db,
      {
        id: newId(),
        projectId,
        url,
        events: [...new Set(input.events)],
        description: input.description ?? null,
        secret,
        createdBy: user.id,
      },
      webhookLimits.maxPerProject,
    )
    if (!webhook)
      throw new RequestError(
        'too_many_webhooks',
        `a project may have at most ${webhookLimits.maxPerProject} webhooks; delete one first`,
      )
    return { ...webhook, secret }
  }

  /** A creation again, for its Idempotency-Key's replay: the subscription with its current secret. */
  /** The webhook an Idempotency-Key's replay answers (created or rotated), with its current secret. */
  async withSecret(user: User, projectId: string, webhookId: string): Promise<WebhookWithSecret> {
    const project = await this.#projects.owned(user, projectId)
    const webhook = await getWebhookWithSecret(this.#store, project.id, webhookId)
    if (!webhook) throw new RequestError('not_found', 'the webhook this Idempotency-Key stands for has been deleted')
    return webhook
  }

  async list(user: User, projectId: string, page: PageRequest): Promise<Page<WebhookRecord>> {
    const project = await this.#projects.owned(user, projectId)
    return listWebhooks(this.#store, project.id, page)
  }

  async get(user: User, projectId: string, webhookId: string): Promise<WebhookRecord> {
    const project = await this.#projects.owned(user, projectId)
    return found(await getWebhook(this.#store, project.id, webhookId))
  }

  /** Changes the URL, events, description; `enabled: true` re-enables a disabled one (its failure record cleared). */
  async update(user: User, projectId: string, webhookId: string, change: WebhookChange): Promise<WebhookRecord> {
    const project = await this.#projects.owned(user, projectId)
    const url = change.url === undefined ? undefined : checkWebhookUrl(change.url, this.#settings.allowPrivate)
    const updated = found(
      await updateWebhook(this.#store, project.id, webhookId, {
        ...(url !== undefined && { url }),
        ...(change.events !== undefined && { events: [...new Set(change.events)] }),
        ...(change.description !== undefined && { description: change.description }),
        ...(change.enabled !== undefined && { enabled: change.enabled }),
      }),
    )
    // Messages that waited while it was disabled go now.
    if (change.enabled) this.#wake()
    return updated
  }

  /** A new secret, shown once; the old one keeps signing (a second signature) for the grace period. */
  /** Checks the caller may rotate; the rotation itself runs on the executor given (an idempotent request's transaction). */
  async prepareRotation(
    user: User,
    projectId: string,
    webhookId: string,
  ): Promise<(db: Executor) => Promise<WebhookWithSecret>> {
    const project = await this.#projects.owned(user, projectId)
    return async (db) => {
      const secret = newSecret()
      const until = new Date(Date.now() + this.#settings.secretGraceMs)
      const webhook = found(await rotateWebhookSecret(db, project.id, webhookId, secret, until))
      return { ...webhook, secret }
    }
  }

  async remove(user: User, projectId: string, webhookId: string): Promise<void> {
    const project = await this.#projects.owned(user, projectId)
    if (!(await deleteWebhook(this.#store, project.id, webhookId))) throw notFoundError('webhook')
  }

  async deliveries(user: User, projectId: string, webhookId: string, page: PageRequest): Promise<Page<DeliveryRecord>> {
    const webhook = await this.get(user, projectId, webhookId)
    return listDeliveries(this.#store, webhook.id, page)
  }

  async delivery(user: User, projectId: string, webhookId: string, deliveryId: string): Promise<DeliveryRecord> {
    const webhook = await this.get(user, projectId, webhookId)
    const delivery = await getDelivery(this.#store, webhook.id, deliveryId)
    if (!delivery) throw notFoundError('delivery')
    return delivery
  }

  /** Sends a message again (same body, same `webhook-id`) with a fresh retry window. */
  /**
   * Checks the caller may redeliver; the message is made pending again on the executor given (an
   * idempotent request's transaction). Call `nudge()` once that has committed.
   */
  async prepareRedelivery(
    user: User,
    projectId: string,
    webhookId: string,
    deliveryId: string,
  ): Promise<(db: Executor) => Promise<DeliveryRecord>> {
    const webhook = await this.get(user, projectId, webhookId)
    // Checked only when it would send: a retry whose first attempt went through is replayed even if
    // the webhook was disabled since.
    return async (db) => {
      if (!webhook.enabled)
        throw new RequestError('webhook_disabled', 'the webhook is disabled; enable it (PATCH {"enabled": true}) first')
      const delivery = await redeliverMessage(db, webhook.id, deliveryId)
      if (!delivery) throw notFoundError('delivery')
      return delivery
    }
  }

  /** Wakes the deliverer for a message just made pending. */
  nudge(): void {
    this.#wake()
  }
}

function found(webhook: WebhookRecord | undefined): WebhookRecord {
  if (!webhook) throw notFoundError('webhook')
  return webhook
}

/** The URL as stored (normalised), or the refusal: `invalid_webhook_url` for its shape, `webhook_url_not_allowed` for where it points. */
export function checkWebhookUrl(raw: string, allowPrivate: boolean): string {
  const invalid = (why: string) =>
    new RequestError('invalid_webhook_url', `body.url: ${why}`, [{ path: 'body.url', message: why }])
  const refused = (why: string) =>
    new RequestError('webhook_url_not_allowed', `body.url: ${why}`, [{ path: 'body.url', message: why }])
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw invalid('not a URL')
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw invalid(`scheme ${url.protocol} is not http or https`)
  if (url.username || url.password)
    throw invalid('credentials in the URL are not accepted (put a token in the path or query, or verify the signature)')
  if (url.href.length > webhookLimits.maxUrlLength)
    throw invalid(`longer than ${webhookLimits.maxUrlLength} characters`)
  if (allowPrivate) return url.href
  if (url.protocol !== 'https:') throw refused('https is required (http only with PLINTH_WEBHOOK_ALLOW_PRIVATE)')
  const literal = ipLiteral(url)
  const reason = literal && nonPublicReason(literal)
  if (reason)
    throw refused(
      `${reason}: webhooks may only reach public addresses (PLINTH_WEBHOOK_ALLOW_PRIVATE allows private ones)`,
    )
  const host = url.hostname.replace(/\.$/, '')
  if (host === 'localhost' || host.endsWith('.localhost'))
    throw refused('localhost is this host: webhooks may only reach public addresses')
  return url.href
}
