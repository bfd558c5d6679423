import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { detectHostSupport, probeSandbox, type ProbeResult } from '../../src/exec/index.js'

export const sandboxUser = process.env.PLINTH_TEST_SANDBOX_USER ?? 'plinth-sandbox'

/**
 * Whether the real sandbox can run here. Without it the sandbox suites skip with the probe's reason;
 * with REQUIRE_BWRAP=1 (CI) they fail instead.
 */
export async function sandboxAvailable(suite: string): Promise<ProbeResult> {
  const { result } = await probeSandbox({ sandboxUser, requireCgroups: true, support: await detectHostSupport() })
  if (!result.ok) {
    if (process.env.REQUIRE_BWRAP === '1')
      throw new Error(`REQUIRE_BWRAP=1 but the sandbox cannot run: ${result.reason}`)
    console.warn(
      `\n[plinth tests] ${suite} skipped: the sandbox cannot run here (${result.reason}); REQUIRE_BWRAP=1 makes this a failure\n`,
    )
  }
  return result
}

/**
 * Processes the sandbox user still has running on the host (there must be none after any run).
 * Zombies are not running: bwrap's outer process may exit before its inner one is reaped, and the
 * orphan waits for the host's init to reap it (on this VM's init, a while). Processes another test
 * file's server started (their nearest node ancestor is another process) are not this file's: test
 * files run in parallel workers, with one sandbox user.
 */
export function sandboxUserProcesses(): string[] {
  let lines: string[]
  try {
    lines = execFileSync('ps', ['-u', sandboxUser, '-o', 'pid=,stat=,args='], { encoding: 'utf8' }).split('\n')
  } catch {
    return [] // ps exits 1 when there are none
  }
  return lines.filter(
    (line) => line.trim() && !/^\s*\d+\s+Z/.test(line) && !startedElsewhere(Number(line.trim().split(/\s+/)[0])),
  )
}

/** Whether the process descends from a node process other than this one (another test worker). */
function startedElsewhere(pid: number): boolean {
  for (let current = pid, hops = 0; current > 1 && hops < 64; hops++) {
    const parent = parentOf(current)
    if (parent === undefined || parent <= 1) return false
    if (parent === process.pid) return false
    if (commandOf(parent) === 'node') return true
    current = parent
  }
  return false
}

function parentOf(pid: number): number | undefined {
  try {
    // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces and parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
  } catch {
    return undefined
  }
}

function commandOf(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
  } catch {
    return undefined
  }
}
