/**
 * A deterministic corpus of mixed Chinese/English text for the retrieval bench. Like real knowledge
 * bases it is topical: each document belongs to one of a few hundred topics and draws most of its
 * words from that topic's vocabulary, the rest from a Zipf distribution over a generated English and
 * a generated Chinese vocabulary. Queries are a few words of one topic.
 *
 * (A corpus of uniformly random words has no such structure: a short query is then far from every
 * document vector, and HNSW recall collapses — 0.3 at ef_search 100 in our measurements — which is
 * a property of that data, not of real documents.)
 */

/** mulberry32: a small seeded PRNG (the bench prints its seed; the same seed gives the same corpus). */
export function random(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const syllables =
  'ka lo mi ne ru ta vi so pe da li mo gra ster vel tion pro con dis ment ics ure ble ness cor tri mar phon log net ser vic'.split(
    ' ',
  )

interface Topic {
  english: string[]
  chinese: string[]
}

export class Corpus {
  readonly #next: () => number
  readonly #english: string[]
  readonly #chinese: string[]
  readonly #cumulative: number[]
  readonly #topics: Topic[]

  constructor(next: () => number, options: { vocabulary?: number; topics?: number; topicWords?: number } = {}) {
    this.#next = next
    const size = options.vocabulary ?? 4000
    const english = new Set<string>()
    while (english.size < size) {
      const parts = 2 + Math.floor(next() * 2)
      english.add(Array.from({ length: parts }, () => syllables[Math.floor(next() * syllables.length)]).join(''))
    }
    // 600 CJK code points, words of 2–3 characters.
    const hanzi = Array.from({ length: 600 }, (_, index) => String.fromCodePoint(0x4e00 + ((index * 37) % 20000)))
    const chinese = new Set<string>()
    while (chinese.size < size) {
      const length = 2 + Math.floor(next() * 2)
      chinese.add(Array.from({ length }, () => hanzi[Math.floor(next() * hanzi.length)]).join(''))
    }
    this.#english = [...english]
    this.#chinese = [...chinese]
    // Zipf (s ≈ 1.05) by inverse transform over a cumulative table.
    const weights = Array.from({ length: size }, (_, rank) => 1 / (rank + 1) ** 1.05)
    const total = weights.reduce((sum, weight) => sum + weight, 0)
    let running = 0
    this.#cumulative = weights.map((weight) => (running += weight / total))
    const topicWords = options.topicWords ?? 40
    this.#topics = Array.from({ length: options.topics ?? 300 }, () => ({
      english: Array.from({ length: topicWords }, () => this.#english[Math.floor(next() * size)]!),
      chinese: Array.from({ length: topicWords }, () => this.#chinese[Math.floor(next() * size)]!),
    }))
  }

  get topicCount(): number {
    return this.#topics.length
  }

  /** A paragraph of about `chars` characters of one topic: 60 % topic words, the rest common words. */
  paragraph(topic: number, chars = 550): string {
    const next = this.#next
    const words = this.#topics[topic]!
    let text = ''
    while (text.length < chars) {
      const chinese = next() < 0.5
      const word =
        next() < 0.6
          ? this.#topicWord(words, chinese)
          : chinese
            ? this.#chinese[this.#rank()]!
            : this.#english[this.#rank()]!
      text += chinese ? word + (next() < 0.15 ? '。' : '') : ` ${word}${next() < 0.1 ? '.' : ''} `
    }
    return text.replace(/ +/g, ' ').trim()
  }

  /** A query of 2–3 words of one topic: English, Chinese, or both. */
  query(): string {
    const next = this.#next
    const words = this.#topics[Math.floor(next() * this.#topics.length)]!
    const kind = next()
    if (kind < 1 / 3) return `${this.#topicWord(words, false)} ${this.#topicWord(words, false)}`
    if (kind < 2 / 3) return `${this.#topicWord(words, true)}${this.#topicWord(words, true)}`
    return `${this.#topicWord(words, false)} ${this.#topicWord(words, true)} ${this.#topicWord(words, false)}`
  }

  /** A topic word, the first ones of the list more often (geometric). */
  #topicWord(topic: Topic, chinese: boolean): string {
    const list = chinese ? topic.chinese : topic.english
    return list[Math.min(list.length - 1, Math.floor(-Math.log(1 - this.#next()) * 8))]!
  }

  #rank(): number {
    const target = this.#next()
    let low = 0
    let high = this.#cumulative.length - 1
    while (low < high) {
      const middle = (low + high) >> 1
      if (this.#cumulative[middle]! < target) low = middle + 1
      else high = middle
    }
    return low
  }
}
