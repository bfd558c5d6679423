import { describe, expect, it } from 'vitest'
import { chunkMarkdown } from './chunker.js'
import { HashingEmbedder } from './embeddings.js'
import { cleanText, queryTokens, retokenizes, snippet, tokenize, toTsquery, toTsvector, wordForms } from './text.js'

describe('tokenize', () => {
  it('turns CJK runs into overlapping bigrams and keeps words of other scripts', () => {
    expect(tokenize('编写项目建议书的要点')).toEqual([
      '编写',
      '写项',
      '项目',
      '目建',
      '建议',
      '议书',
      '书的',
      '的要',
      '要点',
    ])
    expect(tokenize('Budget 项目 plan, Ünïcode ２０２６')).toEqual(['budget', '项目', 'plan', 'ünïcode', '2026'])
    expect(tokenize('字')).toEqual(['字'])
    // The query's bigrams are all in the document's: the full-text path finds it.
    const document = new Set(tokenize('编写项目建议书的要点'))
    expect(tokenize('项目建议书').every((token) => document.has(token))).toBe(true)
  })

  it('ends a word of letters or digits where CJK text begins, and the other way round', () => {
    expect(tokenize('2024年预算报告已经提交。请查看Q3季度的OKR目标。使用Python编程')).toEqual([
      '2024',
      '年预',
      '预算',
      '算报',
      '报告',
      '告已',
      '已经',
      '经提',
      '提交',
      '请查',
      '查看',
      'q3',
      '季度',
      '度的',
      'okr',
      '目标',
      '使用',
      'python',
      '编程',
    ])
    expect(tokenize('iPhone用户')).toEqual(['iphone', '用户'])
    // Which stored texts version 1 tokenized differently: a letter or digit right before CJK text.
    expect(retokenizes('Python编程')).toBe(true)
    expect(retokenizes('２０２４年')).toBe(true)
    expect(retokenizes('编程 Python 2024 年')).toBe(false)
    expect(retokenizes('编程Python')).toBe(false)
    expect(retokenizes('plain English words')).toBe(false)
  })

  it('keeps the long-vowel and iteration marks in CJK text; punctuation still ends a run', () => {
    expect(tokenize('コーヒー')).toEqual(['コー', 'ーヒ', 'ヒー'])
    expect(tokenize('人々、時々')).toEqual(['人々', '時々'])
    expect(retokenizes('コーヒーを飲む')).toBe(true)
    // Characters beyond the Basic Multilingual Plane start a CJK run too.
    expect(tokenize('𠮷野家')).toEqual(['𠮷野', '野家'])
  })

  it('a single CJK character in a query matches the words that begin with it', () => {
    expect(toTsquery(queryTokens('熊'))).toBe("'熊':*")
    expect(toTsquery(queryTokens('熊猫'))).toBe("'熊猫'")
  })

  it('drops stop words and treats query syntax as plain text', () => {
    expect(tokenize('the plan of the year')).toEqual(['plan', 'year'])
    expect(queryTokens('\'a & | !b:* " \\\\ drop table')).toEqual(['b', 'drop', 'table'])
  })
})

describe('tsvector and tsquery literals', () => {
  it('quote lexemes so quotes and backslashes cannot break out', () => {
    expect(toTsvector("don't x\\y")).toBe("'don':1 't':2 'x':3 'y':4")
    expect(toTsquery(["o'brien", 'back\\slash'])).toBe("'o''brien' | 'back\\\\slash'")
    expect(toTsvector('plan plan 计划')).toBe("'plan':1,2 '计划':3")
  })
})

describe('word forms in queries', () => {
  it('finds plurals and singulars, and the base of -ed and -ing forms', () => {
    expect(wordForms('wombat')).toContain('wombats')
    expect(wordForms('budgets')).toContain('budget')
    expect(wordForms('policies')).toContain('policy')
    expect(wordForms('box')).toContain('boxes')
    expect(wordForms('dropping')).toContain('drop')
    expect(wordForms('produced')).toContain('produce')
    // Not English words of letters: as they are (CJK bigrams, numbers, short words).
    expect(wordForms('项目')).toEqual(['项目'])
    expect(wordForms('v2')).toEqual(['v2'])
    expect(wordForms('ok')).toEqual(['ok'])
    expect(toTsquery(['wombat', '项目'])).toBe("('wombat' | 'wombats') | '项目'")
  })
})

describe('snippet', () => {
  it('is the window around the first match, with the matched spans marked', () => {
    const text = `${'filler '.repeat(60)}the failover happened when the disk filled up${' tail'.repeat(60)}`
    const result = snippet(text, queryTokens('disk failover'))
    expect(result.text.length).toBeLessThanOrEqual(240)
    const marked = result.highlights.map(([start, end]) => result.text.slice(start, end))
    expect(marked).toEqual(['failover', 'disk'])
    const chinese = snippet('背景。编写项目建议书的要点如下。', queryTokens('项目建议书'))
    expect(chinese.highlights.map(([start, end]) => chinese.text.slice(start, end))).toEqual(['项目建议书'])
  })
})

describe('chunkMarkdown', () => {
  it('cuts at about 800 characters along sections and paragraphs, carrying heading paths', () => {
    const paragraph = (n: number): string => `Paragraph ${n}. ${'word '.repeat(60).trim()}.`
    const markdown = [
      '# Guide',
      paragraph(1),
      '## Setup',
      paragraph(2),
      paragraph(3),
      paragraph(4),
      '## Use',
      paragraph(5),
    ].join('\n\n')
    const chunks = chunkMarkdown(markdown)
    expect(chunks.map((chunk) => chunk.heading)).toEqual(['Guide', 'Guide > Setup', 'Guide > Setup', 'Guide > Use'])
    for (const chunk of chunks) expect(chunk.text.length).toBeLessThanOrEqual(800 + 130)
    // The second chunk of a section starts with the tail of the first.
    const [, first, second] = chunks
    expect(first!.text.endsWith(second!.text.split('\n\n')[0]!)).toBe(true)
    expect(chunks.map((chunk) => chunk.seq)).toEqual([0, 1, 2, 3])
  })

  it('keeps fenced code whole, splits an endless sentence, and never loses text', () => {
    const code = '```js\nconst a = 1\n\nconst b = 2\n```'
    expect(chunkMarkdown(`# Code\n\n${code}`)[0]!.text).toBe(code)
    const long = '长'.repeat(2000)
    const chunks = chunkMarkdown(long, { overlap: 0 })
    expect(chunks.map((chunk) => chunk.text).join('')).toBe(long)
    expect(chunkMarkdown('   \n\n ')).toEqual([])
  })
})

describe('HashingEmbedder', () => {
  it('is deterministic, unit length, and closer for texts that share words', async () => {
    const embedder = new HashingEmbedder(256)
    const [a, b, c, again] = await embedder.embed([
      'database failover runbook',
      'runbook for database failover',
      '项目建议书 要点',
      'database failover runbook',
    ])
    expect(again).toEqual(a)
    const dot = (x: number[], y: number[]): number => x.reduce((sum, value, index) => sum + value * y[index]!, 0)
    expect(dot(a!, a!)).toBeCloseTo(1, 5)
    expect(dot(a!, b!)).toBeGreaterThan(dot(a!, c!))
    expect(embedder.id).toBe('hash-v1:256')
  })
})

describe('cleanText', () => {
  it('removes NUL and replaces lone surrogates, keeping pairs', () => {
    expect(cleanText('a\u0000b\ud800c😀')).toBe('ab\ufffdc😀')
  })
})
