import { createHash } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import {
  canonicalJson,
  findIdempotencyRecord,
  KeyTaken,
  saveIdempotencyRecord,
  type Executor,
  type JsonValue,
  type Store,
} from '../store/index.js'
import { HttpProblem } from './problem.js'

// Routes that store an answer themselves (storeAnswer) catch it; routes import no store errors directly.
export { KeyTaken }

const keyPattern = /^[\x21-\x7e]{1,255}$/

/**
 * The request's `Idempotency-Key`: undefined when absent; 400 `validation_failed` unless it is 1–255
 * visible ASCII characters (no spaces).
 */
export function idempotencyKey(request: FastifyRequest): string | undefined {
  const header = request.headers['idempotency-key']
  if (header === undefined) return undefined
  const key = Array.isArray(header) ? header[0] : header
  if (key === undefined || !keyPattern.test(key)) {
    throw new HttpProblem('validation_failed', 'Idempotency-Key must be 1–255 visible ASCII characters', {
      errors: [{ path: 'headers.idempotency-key', message: 'must be 1–255 visible ASCII characters' }],
    })
  }
  return key
}

/**
 * Runs a creating request at most once per `Idempotency-Key` (per user): the first outcome is
 * stored in the same transaction as the creation and replayed for a repeat with the same request;
 * the same key with a different request is 422 `idempotency_key_reused`.
 */
export async function runIdempotent<T extends object>(
  request: FastifyRequest,
  reply: FastifyReply,
  store: Store,
  userId: string,
  statusCode: number,
  create: (tx: Executor) => Promise<T>,
  /**
   * What is kept of the answer, and how a replay makes it whole again, when the answer holds what
   * must not be stored twice (a webhook's signing secret: only its id is kept).
   */
  kept?: { store: (result: T) => JsonValue; replay: (stored: JsonValue) => Promise<T> },
): Promise<T> {
  reply.code(statusCode)
  const key = idempotencyKey(request)
  if (key === undefined) return store.transaction(create)
  const requestHash = hashRequest(request)
  const replay = async (): Promise<T | undefined> => {
    const record = await findIdempotencyRecord(store, userId, key)
    if (!record) return undefined
    if (record.requestHash !== requestHash) {
      throw new HttpProblem('idempotency_key_reused', 'this Idempotency-Key was used with a different request')
    }
    reply.code(record.statusCode).header('idempotent-replayed', 'true')
    return kept ? kept.replay(record.response) : (record.response as T)
  }
  const previous = await replay()
  if (previous) return previous
  try {
    return await store.transaction(async (tx) => {
      const result = await create(tx)
      const saved = await saveIdempotencyRecord(tx, userId, key, {
        requestHash,
        statusCode,
        response: kept ? kept.store(result) : (result as JsonValue),
      })
      if (!saved) throw new KeyTaken()
      return result
    })
  } catch (error) {
    if (!(error instanceof KeyTaken)) throw error
    const winner = await replay()
    if (winner) return winner
    throw new HttpProblem('idempotency_key_in_progress')
  }
}

/** What makes two requests "the same" for a key: method, route, params and canonical body. */
export function hashRequest(request: FastifyRequest): string {
  return createHash('sha256')
    .update(
      `${request.method} ${request.routeOptions.url ?? request.url}\n${JSON.stringify(request.params)}\n${request.body === undefined ? '' : canonicalJson(request.body)}`,
    )
    .digest('hex')
}

/** The answer stored for `key`, if any; 422 `idempotency_key_reused` when it was for another request. */
export async function storedAnswer(
  store: Store,
  userId: string,
  key: string,
  requestHash: string,
): Promise<{ statusCode: number; response: JsonValue } | undefined> {
  const record = await findIdempotencyRecord(store, userId, key)
  if (!record) return undefined
  if (record.requestHash !== requestHash)
    throw new HttpProblem('idempotency_key_reused', 'this Idempotency-Key was used with a different request')
  return { statusCode: record.statusCode, response: record.response }
}

/** Stores the answer for `key` in the caller's transaction; throws KeyTaken when another request got there first. */
export async function storeAnswer(
  tx: Executor,
  userId: string,
  key: string,
  answer: { requestHash: string; statusCode: number; response: JsonValue },
): Promise<void> {
  if (!(await saveIdempotencyRecord(tx, userId, key, answer))) throw new KeyTaken()
}
