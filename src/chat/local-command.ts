import { spawn } from 'node:child_process'

export interface LocalResult {
  exitCode: number | null
  /** stdout and stderr interleaved as they came, capped. */
  output: string
  truncated: boolean
  timedOut: boolean
}

/**
 * Runs a proposed command on this machine, in `cwd`, through the user's shell: killed after
 * `timeoutMs`, its output kept up to `maxBytes` (the rest counted, not kept).
 */
export function runLocalCommand(
  command: string,
  options: { cwd: string; timeoutMs: number; maxBytes: number; shell?: string },
): Promise<LocalResult> {
  return new Promise((resolve) => {
    const child = spawn(options.shell ?? process.env.SHELL ?? '/bin/sh', ['-c', command], {
      cwd: options.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    })
    const chunks: Buffer[] = []
    let kept = 0
    let total = 0
    let timedOut = false
    const take = (chunk: Buffer): void => {
      total += chunk.length
      if (kept >= options.maxBytes) return
      const part = chunk.subarray(0, options.maxBytes - kept)
      chunks.push(part)
      kept += part.length
    }
    child.stdout.on('data', take)
    child.stderr.on('data', take)
    const timer = setTimeout(() => {
      timedOut = true
      // The whole process group: a shell's children go too.
      try {
        process.kill(-(child.pid ?? 0), 'SIGKILL')
      } catch {
        child.kill('SIGKILL')
      }
    }, options.timeoutMs)
    const finish = (exitCode: number | null): void => {
      clearTimeout(timer)
      let output = Buffer.concat(chunks).toString('utf8')
      if (total > kept) output += `\n... [TRUNCATED, total=${total} bytes]`
      resolve({ exitCode, output, truncated: total > kept, timedOut })
    }
    child.on('error', (error) => {
      chunks.push(Buffer.from(String(error.message)))
      finish(null)
    })
    child.on('close', (code) => finish(code))
  })
}
