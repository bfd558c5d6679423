import type { DecisionView, DispatchOutcome } from './bus-types.js'

/** Told when a decision is resolved (the run manager resumes runs with it). */
export type DecisionListener = (decision: DecisionView, dispatch: DispatchOutcome | null) => void

/** Who is told when a decision is resolved: answered (with the dispatch's outcome) or expired (null). */
export class DecisionFeed {
  readonly #listeners = new Set<DecisionListener>()

  subscribe(listener: DecisionListener): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  notify(decision: DecisionView, outcome: DispatchOutcome | null): void {
    for (const listener of this.#listeners) listener(decision, outcome)
  }
}
