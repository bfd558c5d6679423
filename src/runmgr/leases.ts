import { randomUUID } from 'node:crypto'

/**
 * This process's run leases (docs/architecture.md#cooperating-instances): how long one lasts, and a
 * new fencing token per acquisition, so even this process's own stale driver is fenced out.
 */
export class LeaseClock {
  readonly #instanceId = randomUUID()
  #seq = 0
  /** A lease's length: the heartbeat renews it at a third of that. */
  readonly ms: number

  constructor(ms: number) {
    this.ms = ms
  }

  /** When a lease taken or renewed now runs out. */
  expiry(): Date {
    return new Date(Date.now() + this.ms)
  }

  newLease(): { owner: string; expiresAt: Date } {
    return { owner: `${this.#instanceId}.${++this.#seq}`, expiresAt: this.expiry() }
  }
}
