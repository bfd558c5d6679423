/**
 * Text as both search paths see it. Words of alphabetic scripts become lowercase tokens; runs of
 * CJK characters (which have no spaces) become overlapping bigrams, so `项目建议书` is
 * `项目 目建 建议 议书` and matches any text containing it; a lone CJK character stands for itself.
 * The same tokens feed the full-text vector (built here, not by the database's parser, so the result
 * does not depend on its locale) and the hashing embedder.
 */

// A CJK character: a letter or digit of those scripts, by script extensions so that the long-vowel
// mark ー and the iteration mark 々 (script Common, used only in CJK text) belong (punctuation does not).
const cjkScripts = '\\p{scx=Han}\\p{scx=Hiragana}\\p{scx=Katakana}\\p{scx=Hangul}'
const cjkChar = `(?:(?=[\\p{L}\\p{N}])[${cjkScripts}])`
const cjkStart = new RegExp(`^${cjkChar}`, 'u')
// A word of other letters and digits ends where CJK text begins: `2024年预算` is `2024` then CJK text.
const tokenPattern = new RegExp(`${cjkChar}+|(?:(?!${cjkChar})[\\p{L}\\p{N}_])+`, 'gu')

// Version 1: words ran on into CJK text (`python编程` one token), and ー split katakana words.
const v1Chars = '[\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}]'
const v1Start = new RegExp(`^${v1Chars}`, 'u')
const v1Pattern = new RegExp(`${v1Chars}+|[\\p{L}\\p{N}_]+`, 'gu')

/**
 * The tokenizer's revision, recorded with stored knowledge and memories (`rag_settings.tokenizer`):
 * 2 ends a word where CJK text begins and keeps ー and 々 in CJK text. Texts stored by an earlier one
 * are tokenized again at start.
 */
export const tokenizerVersion = 2

/** Whether `text` tokenizes differently now than under version 1. */
export function retokenizes(text: string): boolean {
  const now = tokensOf(text, tokenPattern, cjkStart)
  const before = tokensOf(text, v1Pattern, v1Start)
  return now.length !== before.length || now.some((token, index) => token !== before[index])
}
const maxTokenLength = 64

/** Words so common that matching them says nothing; dropped from queries and vectors alike. */
const stopWords = new Set(
  'a an and are as at be by for from has have in is it its of on or that the this to was were will with'.split(' '),
)

/** The tokens of a text, in order (CJK bigrams included). */
export function tokenize(text: string): string[] {
  return tokensOf(text, tokenPattern, cjkStart)
}

function tokensOf(text: string, pattern: RegExp, cjkRun: RegExp): string[] {
  const tokens: string[] = []
  for (const match of text.normalize('NFKC').toLowerCase().matchAll(pattern)) {
    const run = match[0]
    if (cjkRun.test(run)) {
      const chars = [...run]
      if (chars.length === 1) tokens.push(run)
      for (let index = 0; index + 1 < chars.length; index++) tokens.push(chars[index]! + chars[index + 1]!)
    } else if (!stopWords.has(run) && run.length <= maxTokenLength) {
      tokens.push(run)
    }
  }
  return tokens
}

/** Quotes a lexeme for tsvector/tsquery input syntax. */
function lexeme(token: string): string {
  return `'${token.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`
}

/** tsvector input syntax for a text: each distinct token with its positions (Postgres keeps ≤ 256 each, ≤ 16383). */
export function toTsvector(text: string): string {
  const positions = new Map<string, number[]>()
  tokenize(text).forEach((token, index) => {
    const position = Math.min(index + 1, 16383)
    const list = positions.get(token)
    if (!list) positions.set(token, [position])
    else if (list.length < 256 && list.at(-1) !== position) list.push(position)
  })
  return [...positions].map(([token, list]) => `${lexeme(token)}:${list.join(',')}`).join(' ')
}

/** The distinct tokens of a query (at most `max`), in order of first appearance. */
export function queryTokens(query: string, max = 64): string[] {
  return [...new Set(tokenize(query))].slice(0, max)
}

/**
 * The forms of an English word a query should find too: its plural or singular, and for an -ed or
 * -ing form its base (`wombat` finds `wombats`, `dropping` finds `drop`, `produced` `produce`). Stored
 * vectors keep words as written, so the variants go into the query instead of stemming both sides
 * (no stored chunk needs reindexing). Extra forms that match nothing cost nothing.
 */
export function wordForms(token: string): string[] {
  if (!/^[a-z]{3,}$/.test(token)) return [token]
  const forms = new Set([token])
  const sibilant = /(s|x|z|ch|sh)$/
  if (token.endsWith('ies') && token.length > 4) forms.add(`${token.slice(0, -3)}y`)
  else if (token.endsWith('es') && sibilant.test(token.slice(0, -2))) forms.add(token.slice(0, -2))
  if (token.endsWith('s') && !token.endsWith('ss')) forms.add(token.slice(0, -1))
  else {
    forms.add(sibilant.test(token) ? `${token}es` : `${token}s`)
    if (/[^aeiou]y$/.test(token)) forms.add(`${token.slice(0, -1)}ies`)
  }
  if (token.length >= 5 && token.endsWith('ed')) {
    const stem = token.slice(0, -2)
    forms.add(stem).add(`${stem}e`)
    if (/([^aeiou])\1$/.test(stem)) forms.add(stem.slice(0, -1))
  }
  if (token.length >= 6 && token.endsWith('ing')) {
    const stem = token.slice(0, -3)
    forms.add(stem).add(`${stem}e`)
    if (/([^aeiou])\1$/.test(stem)) forms.add(stem.slice(0, -1))
  }
  return [...forms]
}

/**
 * One query token in tsquery syntax: itself or any of its forms. A lone CJK character (texts are
 * indexed as bigrams) matches the bigrams that begin with it.
 */
function term(token: string): string {
  if (token.length <= 2 && [...token].length === 1 && cjkStart.test(token)) return `${lexeme(token)}:*`
  const forms = wordForms(token)
  return forms.length === 1 ? lexeme(token) : `(${forms.map(lexeme).join(' | ')})`
}

/**
 * tsquery input syntax matching any of the tokens (ranking rewards chunks that match more of them,
 * close together). Whatever the user typed (operators, quotes, backslashes) is only ever text here.
 */
export function toTsquery(tokens: readonly string[]): string {
  return tokens.map(term).join(' | ')
}

/** Tokens a pair stage combines (n tokens make n(n-1)/2 pairs). */
const maxPairTokens = 8

/**
 * The full-text stages for a query, most precise first: every token (AND), then any two of them
 * (for three or more), then any one. Each is cheap where the earlier ones found enough.
 */
export function tsqueryStages(tokens: readonly string[]): string[] {
  if (tokens.length === 0) return []
  if (tokens.length === 1) return [term(tokens[0]!)]
  const stages = [tokens.map(term).join(' & ')]
  if (tokens.length >= 3) {
    const head = tokens.slice(0, maxPairTokens)
    const pairs: string[] = []
    for (let a = 0; a < head.length; a++)
      for (let b = a + 1; b < head.length; b++) pairs.push(`(${term(head[a]!)} & ${term(head[b]!)})`)
    stages.push(pairs.join(' | '))
  }
  stages.push(toTsquery(tokens))
  return stages
}

/** A highlighted excerpt of a chunk: the window around the first match, and where matches are in it. */
export interface Snippet {
  text: string
  /** `[start, end)` offsets (UTF-16, as in JavaScript strings) of matched spans within `text`. */
  highlights: Array<[number, number]>
}

/** The part of `text` around the first occurrence of any token, up to `width` characters. */
export function snippet(text: string, tokens: readonly string[], width = 240): Snippet {
  const lower = text.normalize('NFKC').toLowerCase()
  // NFKC can change lengths; match on the original when it does not.
  const haystack = lower.length === text.length ? lower : text.toLowerCase()
  const spans: Array<[number, number]> = []
  for (const token of tokens) {
    let from = 0
    for (;;) {
      const at = haystack.indexOf(token, from)
      if (at < 0) break
      spans.push([at, at + token.length])
      from = at + token.length
    }
  }
  spans.sort((a, b) => a[0] - b[0] || b[1] - a[1])
  const first = spans[0]?.[0] ?? 0
  let start = Math.max(0, first - Math.floor(width / 4))
  const end = Math.min(text.length, start + width)
  start = Math.max(0, end - width)
  const merged: Array<[number, number]> = []
  for (const [spanStart, spanEnd] of spans) {
    if (spanStart < start || spanEnd > end) continue
    const [relativeStart, relativeEnd] = [spanStart - start, spanEnd - start]
    const last = merged.at(-1)
    if (last && relativeStart <= last[1]) last[1] = Math.max(last[1], relativeEnd)
    else merged.push([relativeStart, relativeEnd])
  }
  return { text: text.slice(start, end), highlights: merged }
}

/** Text fit to store: no NUL, no lone surrogates (Postgres text refuses the first; UTF-8 cannot hold the second). */
export function cleanText(text: string): string {
  return (
    text
      // eslint-disable-next-line no-control-regex -- NUL is exactly what is removed
      .replace(/\u0000/g, '')
      .replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD')
  )
}
