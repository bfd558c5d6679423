import { randomFillSync } from 'node:crypto'

// ULIDs (https://github.com/ulid/spec): 48-bit millisecond time + 80 random bits, Crockford base32.
// Generated here rather than with the `ulid` package, which draws one random byte per character
// through WebCrypto (about 40 µs an id, a noticeable share of an agent round).
const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
const pool = Buffer.allocUnsafe(4096)
let poolOffset = pool.length

let lastTime = -1
// The random part as 16 base32 digits, most significant first (5 bits each = 80 bits).
const lastRandom = new Uint8Array(16)

function refillRandom(): void {
  if (poolOffset + 16 > pool.length) {
    randomFillSync(pool)
    poolOffset = 0
  }
  for (let index = 0; index < 16; index++) lastRandom[index] = pool[poolOffset + index]! & 31
  poolOffset += 16
}

/** Adds one to the random part (monotonic ids within one millisecond); false on overflow. */
function incrementRandom(): boolean {
  for (let index = 15; index >= 0; index--) {
    if (lastRandom[index]! < 31) {
      lastRandom[index]!++
      return true
    }
    lastRandom[index] = 0
  }
  return false
}

/** A new sortable id (ULID, 26 chars of Crockford base32), strictly increasing within this process. */
export function newId(): string {
  let now = Date.now()
  if (now <= lastTime) {
    // Same (or an earlier, after a clock step back) millisecond: continue from the last id.
    now = lastTime
    if (!incrementRandom()) {
      now = lastTime + 1
      refillRandom()
    }
  } else {
    refillRandom()
  }
  lastTime = now
  let out = ''
  for (let shift = 45; shift >= 0; shift -= 5) out += alphabet[Math.floor(now / 2 ** shift) % 32]
  for (let index = 0; index < 16; index++) out += alphabet[lastRandom[index]!]
  return out
}

/** The id right after `id` in sort order (the same shape): for a new id that must sort after it. */
export function idAfter(id: string): string {
  const digits = [...id].map((char) => alphabet.indexOf(char))
  for (let index = digits.length - 1; index >= 0; index--) {
    if (digits[index]! < 31) {
      digits[index]!++
      return digits.map((digit) => alphabet[digit]).join('')
    }
    digits[index] = 0
  }
  throw new Error('no id sorts after the largest one')
}

const ulidPattern = /^[0-9A-HJKMNP-TV-Z]{26}$/

/** Whether a string has the shape of an id issued by `newId`. */
export function isId(value: string): boolean {
  return ulidPattern.test(value)
}
