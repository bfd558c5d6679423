import { execFileSync } from 'node:child_process'
import { detectHostSupport, probeSandbox, type ProbeResult } from '../../src/exec/index.js'

export const sandboxUser = process.env.PLINTH_TEST_SANDBOX_USER ?? 'plinth-sandbox'

/**
 * Whether the real sandbox can run here. Without it the sandbox suites skip with the probe's reason;
 * with REQUIRE_BWRAP=1 (CI) they fail instead.
 */
export async function sandboxAvailable(suite: string): Promise<ProbeResult> {
  const { result } = await probeSandbox({ sandboxUser, requireCgroups: true, support: await detectHostSupport() })
  if (!result.ok) {
    if (process.env.REQUIRE_BWRAP === '1') throw new Error(`REQUIRE_BWRAP=1 but the sandbox cannot run: ${result.reason}`)
    console.warn(`\n[plinth tests] ${suite} skipped: the sandbox cannot run here (${result.reason}); REQUIRE_BWRAP=1 makes this a failure\n`)
  }
  return result
}

/**
 * Processes the sandbox user still has running on the host (there must be none after any run).
 * Zombies are not running: bwrap's outer process may exit before its inner one is reaped, and the
 * orphan waits for the host's init to reap it (on this VM's init, a while).
 */
export function sandboxUserProcesses(): string[] {
  try {
    return execFileSync('ps', ['-u', sandboxUser, '-o', 'pid=,stat=,args='], { encoding: 'utf8' })
      .split('\n')
      .filter((line) => line.trim() && !/^\s*\d+\s+Z/.test(line))
  } catch {
    return [] // ps exits 1 when there are none
  }
}
