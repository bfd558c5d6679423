import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

// The code and the docs cite only what is in the repository: no section numbers of a spec kept
// elsewhere, no issue numbers, and every relative link or `docs/….md#anchor` pointer resolves.

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const self = relative(root, fileURLToPath(import.meta.url))

/** Files under `dir` (repository-relative) whose names end with one of `extensions`. */
function filesUnder(dir: string, extensions: readonly string[]): string[] {
  const found: string[] = []
  const walk = (path: string): void => {
    for (const entry of readdirSync(join(root, path), { withFileTypes: true })) {
      if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue
      const child = join(path, entry.name)
      if (entry.isDirectory()) walk(child)
      else if (extensions.some((extension) => entry.name.endsWith(extension))) found.push(child)
    }
  }
  if (existsSync(join(root, dir))) walk(dir)
  return found
}

const codeFiles = ['src', 'test', 'scripts', 'bench', 'plugins', 'console']
  .flatMap((dir) => filesUnder(dir, ['.ts', '.tsx', '.js', '.mjs', '.cjs']))
  .filter((path) => path !== self && !path.includes('__fixtures__'))
const markdownFiles = ['README.md', ...filesUnder('docs', ['.md'])]

const read = (path: string): string => readFileSync(join(root, path), 'utf8')

/** Markdown without fenced code blocks (their `#` lines are not headings, their brackets not links). */
function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '')
}

/** A heading's anchor as GitHub makes it: lowercase, punctuation dropped except `-` and `_`, spaces → `-`. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link's text
    .replace(/<[^>]+>/g, '') // inline HTML
    .trim()
    .toLowerCase()
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-')
}

const anchorCache = new Map<string, Set<string>>()

/** The anchors of a markdown file's headings (repeated headings get `-1`, `-2`, … as on GitHub). */
function anchorsOf(path: string): Set<string> {
  let anchors = anchorCache.get(path)
  if (anchors) return anchors
  anchors = new Set()
  const seen = new Map<string, number>()
  for (const match of withoutFences(read(path)).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = slug(match[1]!)
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    anchors.add(count === 0 ? base : `${base}-${count}`)
  }
  anchorCache.set(path, anchors)
  return anchors
}

/** Why `target` (file and optional `#anchor`, relative to `from`'s folder) does not resolve, or null. */
function brokenTarget(from: string, target: string, base = dirname(from)): string | null {
  const [pathPart = '', anchor] = target.split('#', 2) as [string, string | undefined]
  const file = pathPart === '' ? from : join(base, decodeURIComponent(pathPart))
  if (!existsSync(join(root, file))) return `${file} does not exist`
  if (anchor === undefined || anchor === '') return null
  if (!file.endsWith('.md') || statSync(join(root, file)).isDirectory()) return null
  return anchorsOf(file).has(anchor.toLowerCase()) ? null : `${file} has no heading #${anchor}`
}

describe('the repository cites only what it holds', () => {
  it('the code cites no spec sections or files outside the repository', () => {
    // Written in two parts so this file does not match itself.
    const forbidden = [
      new RegExp('SPEC' + ' §'),
      new RegExp('\\.\\./' + 'shared\\b'),
      new RegExp('\\b[Ii]ssues? ' + '#?\\d'),
    ]
    const hits = codeFiles.flatMap((path) =>
      read(path)
        .split('\n')
        .flatMap((line, index) =>
          forbidden.some((pattern) => pattern.test(line)) ? [`${path}:${index + 1}: ${line.trim()}`] : [],
        ),
    )
    expect(hits).toEqual([])
  })

  it('every relative link in README.md and docs/*.md points at a file (and heading) that exists', () => {
    const broken: string[] = []
    for (const path of markdownFiles) {
      // Inline code is not a link either.
      const text = withoutFences(read(path)).replace(/`[^`\n]*`/g, '')
      const targets = [
        ...text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g),
        ...text.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm),
      ].map((match) => match[1]!)
      for (const target of targets) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//') || target.startsWith('/')) continue
        const why = brokenTarget(path, target)
        if (why) broken.push(`${path}: (${target}) — ${why}`)
      }
    }
    expect(broken).toEqual([])
  })

  it('every docs/….md or README.md#… pointer in the code resolves', () => {
    const broken: string[] = []
    for (const path of codeFiles) {
      for (const match of read(path).matchAll(/(?<![\w/.-])((?:docs\/[\w./-]+\.md|README\.md)(?:#[\w-]+)?)/g)) {
        const why = brokenTarget(path, match[1]!, '.')
        if (why) broken.push(`${path}: ${match[1]} — ${why}`)
      }
    }
    expect(broken).toEqual([])
  })

  it('makes anchors as GitHub does', () => {
    expect(slug('AI SDK `useChat`')).toBe('ai-sdk-usechat')
    expect(slug('SSRF: where Plinth may send')).toBe('ssrf-where-plinth-may-send')
    expect(slug('`plinth/client`: the TypeScript client')).toBe('plinthclient-the-typescript-client')
    expect(slug('Sessions and elicitation (Plinth as an MCP server)')).toBe(
      'sessions-and-elicitation-plinth-as-an-mcp-server',
    )
    expect(slug('Postgres with pgvector on Debian (CI and development)')).toBe(
      'postgres-with-pgvector-on-debian-ci-and-development',
    )
    expect(slug('snake_case and dash-ed')).toBe('snake_case-and-dash-ed')
  })
})
