/** A run lease as a transition takes it: the fencing token and when it runs out. */
export interface Lease {
  owner: string
  expiresAt: Date
}
