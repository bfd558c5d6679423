import { createCipheriv, createDecipheriv, randomBytes, scryptSync } from 'node:crypto'

/**
 * Seals JSON with AES-256-GCM under a key derived from PLINTH_SECRET_KEY (scrypt, so a short key is
 * slow to guess offline): `v1.<iv>.<tag>.<ciphertext>` (base64url). `context` (the user and server)
 * is bound as associated data: a sealed value copied to another row does not open there.
 */
export class SecretBox {
  readonly #key: Buffer

  constructor(secret: string) {
    this.#key = scryptSync(secret, 'plinth mcp connections v1', 32)
  }

  seal(value: unknown, context: string): string {
    const iv = randomBytes(12)
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv)
    cipher.setAAD(Buffer.from(context, 'utf8'))
    const body = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final()])
    return ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join(
      '.',
    )
  }

  /** Null when it was sealed under another key (PLINTH_SECRET_KEY changed) or is damaged. */
  open<T>(sealed: string, context: string): T | null {
    const [version, iv, tag, body] = sealed.split('.')
    if (version !== 'v1' || !iv || !tag || body === undefined) return null
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, Buffer.from(iv, 'base64url'))
      decipher.setAuthTag(Buffer.from(tag, 'base64url'))
      decipher.setAAD(Buffer.from(context, 'utf8'))
      return JSON.parse(
        Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8'),
      ) as T
    } catch {
      return null
    }
  }
}
