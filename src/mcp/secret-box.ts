import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto'

/** Seals JSON with AES-256-GCM under a key derived from PLINTH_SECRET_KEY: `v1.<iv>.<tag>.<ciphertext>` (base64url). */
export class SecretBox {
  readonly #key: Buffer

  constructor(secret: string) {
    this.#key = createHash('sha256').update(`plinth mcp connections\0${secret}`).digest()
  }

  seal(value: unknown): string {
    const iv = randomBytes(12)
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv)
    const body = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final()])
    return ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join('.')
  }

  /** Null when it was sealed under another key (PLINTH_SECRET_KEY changed) or is damaged. */
  open<T>(sealed: string): T | null {
    const [version, iv, tag, body] = sealed.split('.')
    if (version !== 'v1' || !iv || !tag || body === undefined) return null
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, Buffer.from(iv, 'base64url'))
      decipher.setAuthTag(Buffer.from(tag, 'base64url'))
      return JSON.parse(Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8')) as T
    } catch {
      return null
    }
  }
}
