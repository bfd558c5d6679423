import { randomBytes } from 'node:crypto'
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js'
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from '@modelcontextprotocol/sdk/shared/auth.js'
import { saveMcpConnection, updateMcpConnection, type McpConnectionRecord, type Store } from '../store/index.js'
import type { SecretBox } from './secret-box.js'

/** What a user's connection keeps, sealed: the client registration, the pending flow, the tokens. */
export interface ConnectionSecrets {
  redirectUrl?: string
  client?: OAuthClientInformationMixed
  tokens?: OAuthTokens
  verifier?: string
  state?: string
  /** When the pending authorization started (ms): a callback later than `pendingTtlMs` is refused. */
  startedAt?: number
}

/** How long a started authorization may wait for its callback. */
export const pendingTtlMs = 10 * 60_000

/** The associated data a user's sealed connection is bound to. */
export const sealContext = (userId: string, server: string): string => `${userId}\0${server}`

/**
 * The SDK's OAuth client provider for one user and one MCP server, kept in `mcp_connections` (sealed).
 * The SDK drives discovery, dynamic registration, PKCE, the code exchange and refresh through it.
 */
export class StoredOAuthProvider implements OAuthClientProvider {
  readonly userId: string
  readonly server: string
  secrets: ConnectionSecrets
  /** Where the user must go to authorize, once the SDK asked for it. */
  authorizationUrl: URL | null = null
  readonly #store: Store
  readonly #box: SecretBox
  readonly #scope: string | undefined

  constructor(deps: {
    store: Store
    box: SecretBox
    userId: string
    server: string
    secrets: ConnectionSecrets
    scopes?: string[]
  }) {
    this.#store = deps.store
    this.#box = deps.box
    this.userId = deps.userId
    this.server = deps.server
    this.secrets = deps.secrets
    this.#scope = deps.scopes?.join(' ')
  }

  static open(deps: {
    store: Store
    box: SecretBox
    record: McpConnectionRecord
    scopes?: string[]
  }): StoredOAuthProvider | null {
    const secrets = deps.box.open<ConnectionSecrets>(
      deps.record.sealed,
      sealContext(deps.record.userId, deps.record.server),
    )
    if (!secrets) return null
    return new StoredOAuthProvider({
      store: deps.store,
      box: deps.box,
      userId: deps.record.userId,
      server: deps.record.server,
      secrets,
      ...(deps.scopes && { scopes: deps.scopes }),
    })
  }

  /** Starts a new authorization: a fresh state, this redirect, no tokens until the callback. */
  async begin(redirectUrl: string): Promise<void> {
    // A registration made for another redirect (Plinth reached at another address) is not reused.
    const client =
      this.secrets.client &&
      'redirect_uris' in this.secrets.client &&
      Array.isArray(this.secrets.client.redirect_uris) &&
      !this.secrets.client.redirect_uris.includes(redirectUrl)
        ? undefined
        : this.secrets.client
    this.secrets = {
      ...this.secrets,
      client,
      redirectUrl,
      state: randomBytes(24).toString('base64url'),
      startedAt: Date.now(),
      tokens: undefined,
      verifier: undefined,
    }
    await this.#persist(true)
  }

  get connected(): boolean {
    return Boolean(this.secrets.tokens?.access_token)
  }

  get redirectUrl(): string | undefined {
    return this.secrets.redirectUrl
  }

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'Plinth',
      redirect_uris: this.secrets.redirectUrl ? [this.secrets.redirectUrl] : [],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      ...(this.#scope && { scope: this.#scope }),
    }
  }

  state(): string {
    return this.secrets.state ?? ''
  }

  clientInformation(): OAuthClientInformationMixed | undefined {
    return this.secrets.client
  }

  async saveClientInformation(client: OAuthClientInformationMixed): Promise<void> {
    this.secrets.client = client
    await this.#persist()
  }

  tokens(): OAuthTokens | undefined {
    return this.secrets.tokens
  }

  async saveTokens(tokens: OAuthTokens): Promise<void> {
    this.secrets = { ...this.secrets, tokens, state: undefined, verifier: undefined, startedAt: undefined }
    await this.#persist()
  }

  redirectToAuthorization(url: URL): void {
    this.authorizationUrl = url
  }

  async saveCodeVerifier(verifier: string): Promise<void> {
    this.secrets.verifier = verifier
    await this.#persist()
  }

  codeVerifier(): string {
    if (!this.secrets.verifier) throw new Error('no authorization is in progress')
    return this.secrets.verifier
  }

  async invalidateCredentials(scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery'): Promise<void> {
    if (scope === 'all' || scope === 'tokens') this.secrets.tokens = undefined
    if (scope === 'all' || scope === 'client') this.secrets.client = undefined
    if (scope === 'all' || scope === 'verifier') this.secrets.verifier = undefined
    await this.#persist()
  }

  /**
   * Writes the row. Only `begin` creates it: a refresh after the user disconnected (deleted the row)
   * must not bring the connection back.
   */
  async #persist(create = false): Promise<void> {
    const record = {
      userId: this.userId,
      server: this.server,
      state: this.secrets.state ?? null,
      connected: this.connected,
      sealed: this.#box.seal(this.secrets, sealContext(this.userId, this.server)),
    }
    if (create) await saveMcpConnection(this.#store, record)
    else await updateMcpConnection(this.#store, record)
  }
}
