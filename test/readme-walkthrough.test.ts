import { spawn, spawnSync } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cliEnv, freePort, plinthBin } from './helpers/cli-process.js'

const root = fileURLToPath(new URL('..', import.meta.url))

/** The sections a reader follows in order, each continuing the same shell (its file, and how many of its blocks). */
const sections: Array<[file: string, title: string, blocks?: number]> = [
  ['README.md', 'Walkthrough with curl'],
  ['docs/guides/operating.md', 'Operators over HTTP'],
  ['docs/guides/commands-and-decisions.md', 'Commands, decisions and audit'],
  ['docs/guides/mcp.md', 'Using Plinth from MCP clients'],
  ['docs/guides/agent-runs.md', 'Agent runs', 1],
  ['docs/guides/agent-runs.md', 'Agent profiles'],
  ['docs/guides/knowledge-and-search.md', 'Knowledge and search', 1],
]

/** The shell blocks of those sections, as one script; `npm start` and `npx plinth` run this checkout. */
async function walkthroughScript(port: number): Promise<string> {
  const parts: string[] = []
  for (const [file, title, count] of sections) {
    const text = `\n${await readFile(join(root, file), 'utf8')}`
    // The section's heading, of level 1–3; it ends at the next one of level 2–3 (a `# ` line is a shell comment).
    const heading = new RegExp(`\\n#{1,3} ${title.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n`).exec(text)
    if (!heading) throw new Error(`${file} has no section ${title}`)
    const rest = text.slice(heading.index + heading[0].length)
    const end = rest.search(/\n#{2,3} /)
    const blocks = [...(end < 0 ? rest : rest.slice(0, end)).matchAll(/```sh\n([\s\S]*?)```/g)].map(
      (match) => match[1]!,
    )
    parts.push(`echo "=== ${title}"`, ...blocks.slice(0, count ?? blocks.length))
  }
  parts.push('kill %1; wait')
  return parts
    .join('\n')
    .replaceAll('localhost:8080', `localhost:${port}`)
    .replaceAll('npm start', `node ${JSON.stringify(plinthBin)} serve`)
    .replaceAll('npx plinth', `node ${JSON.stringify(plinthBin)}`)
}

// Runs the README's walkthrough and the guides that continue it, as a reader would in one shell on a
// fresh data directory: every variable a command uses is set by an earlier one, and no answer is an error.
const hasCurl = spawnSync('curl', ['--version']).status === 0
if (!hasCurl) {
  if (process.env.CI) throw new Error('the README walkthrough needs curl (.ci/run installs it)')
  console.warn('[plinth tests] README walkthrough skipped: curl is not installed')
}

describe.skipIf(!hasCurl)('the README walkthrough', () => {
  let cwd: string
  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'plinth-readme-'))
  })
  afterAll(async () => {
    await rm(cwd, { recursive: true, force: true })
  })

  it('works in the order written', { timeout: 240_000 }, async () => {
    const port = await freePort()
    const script = await walkthroughScript(port)
    const child = spawn('bash', ['-c', `set -u\n${script}`], {
      cwd,
      env: cliEnv({ PORT: String(port) }),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
    const timer = setTimeout(() => child.kill('SIGKILL'), 200_000)
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve))
    clearTimeout(timer)
    // set -u: a variable used before it is set stops the script with "unbound variable".
    expect(output).not.toMatch(/unbound variable|TypeError|command not found/)
    expect(code, output.slice(-3000)).toBe(0)
    // No answer on the way was a problem (4xx/5xx), and every section ran to its end.
    expect(output).not.toMatch(/urn:plinth:problem:/)
    for (const [, title] of sections) expect(output).toContain(`=== ${title}`)
    expect(output).toMatch(/"status":"requires_action"/)
    expect(output).toMatch(/event: run\.completed/)
    expect(output).toMatch(/"status":"cancelled"/)
    expect(output).toMatch(/"title":"写作指南"/)
    expect(output).toMatch(/"tools":\["rdm.ping","rdm.draft.compose","core.knowledge_search"\]/)
    expect(output).toMatch(/"structuredContent":\{[^}]*"target":"db-1"/)
    expect(output).toMatch(/"status":"succeeded","result":\{[^}]*"title":"From MCP"/)
  })
})
