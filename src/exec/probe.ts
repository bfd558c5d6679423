import { execFile } from 'node:child_process'
import { access, chmod, chown, constants, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { promisify } from 'node:util'
import { SandboxBackend, tools, type HostSupport, type SandboxIdentity } from './backends.js'
import { detectCgroups } from './cgroups.js'
import { buildExecEnv } from './exec-env.js'
import { defaultLimits } from './types.js'

const run = promisify(execFile)

/** What the start-up probe found. `ok` false means the sandbox must not be used (fail closed). */
export interface ProbeResult {
  ok: boolean
  reason: string | null
  cgroups: 'v2' | 'v1' | 'none'
  /** The unprivileged user programs run as (when the server runs as root). */
  user: string | null
  bwrapVersion: string | null
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  )
}

async function executable(path: string): Promise<boolean> {
  return access(path, constants.X_OK).then(
    () => true,
    () => false,
  )
}

/** The host's cgroups and rlimit support, shared by both backends. */
export async function detectHostSupport(): Promise<HostSupport> {
  return {
    cgroups: await detectCgroups(),
    prlimit: await executable(tools.prlimit),
    pdeathsig: await pdeathsigWorks(),
  }
}

/** Whether setpriv takes `--pdeathsig` (util-linux 2.33 and later; older and BusyBox ones do not). */
async function pdeathsigWorks(): Promise<boolean> {
  if (!(await executable(tools.setpriv))) return false
  return run(tools.setpriv, ['--pdeathsig', 'KILL', '--', '/bin/true'], { timeout: 5000 }).then(
    () => true,
    () => false,
  )
}

/** Looks a user up in the system's user database (no shell). */
export async function lookupUser(name: string): Promise<SandboxIdentity | null> {
  if (!/^[a-z_][a-z0-9_-]*$/.test(name)) return null
  try {
    const { stdout } = await run('getent', ['passwd', name])
    const fields = stdout.trim().split(':')
    if (fields.length < 4) return null
    return { name, uid: Number(fields[2]), gid: Number(fields[3]) }
  } catch {
    return null
  }
}

/**
 * Checks once that the sandbox can work here and fails closed: bwrap present and able to create its
 * namespaces (tried for real, as the sandbox user), the helpers it needs, an unprivileged user when
 * running as root, and cgroups unless they are explicitly optional.
 */
export async function probeSandbox(options: {
  sandboxUser: string
  requireCgroups: boolean
  support: HostSupport
  /** Where work directories live: the sandbox user must be able to reach it (tried for real). */
  workRoot?: string
}): Promise<{ result: ProbeResult; identity: SandboxIdentity | null }> {
  const { support } = options
  const cgroups = support.cgroups.kind
  const fail = (reason: string, extra: Partial<ProbeResult> = {}): { result: ProbeResult; identity: null } => ({
    result: { ok: false, reason, cgroups, user: null, bwrapVersion: null, ...extra },
    identity: null,
  })
  if (!(await executable(tools.bwrap)))
    return fail(`bubblewrap is not installed (${tools.bwrap}); install it (Debian: apt-get install bubblewrap)`)
  const version = (await run(tools.bwrap, ['--version']).catch(() => ({ stdout: '' }))).stdout.trim() || null
  let identity: SandboxIdentity | null = null
  if (process.getuid?.() === 0) {
    identity = await lookupUser(options.sandboxUser)
    if (!identity) {
      return fail(
        `the server runs as root and the sandbox user ${JSON.stringify(options.sandboxUser)} does not exist; create it with ` +
          `\`useradd --system --no-create-home --shell /usr/sbin/nologin ${options.sandboxUser}\` (or set exec.sandboxUser)`,
        { bwrapVersion: version },
      )
    }
    if (identity.uid === 0)
      return fail(`the sandbox user ${options.sandboxUser} is root; it must be an unprivileged user`, {
        bwrapVersion: version,
      })
    if (!(await executable(tools.setpriv)))
      return fail(`setpriv is missing (${tools.setpriv}, util-linux)`, { bwrapVersion: version })
  }
  if (!support.prlimit) return fail(`prlimit is missing (${tools.prlimit}, util-linux)`, { bwrapVersion: version })
  if (cgroups === 'none' && options.requireCgroups) {
    const reason = support.cgroups.kind === 'none' ? support.cgroups.reason : ''
    return fail(
      `no usable cgroups (${reason}); run the server as root on a host with cgroup v2 or the v1 pids and memory controllers, or set exec.requireCgroups to false`,
      { bwrapVersion: version },
    )
  }
  // Try it, in a directory where work directories will be: a program that must see its own namespaces.
  // Where work directories will be; before the first exists, its nearest existing ancestor (the probe
  // then proves the same path is traversable without creating anything that stays).
  let parent = options.workRoot ?? tmpdir()
  if (options.workRoot && (await exists(options.workRoot))) await chmod(options.workRoot, 0o711)
  while (!(await exists(parent)) && dirname(parent) !== parent) parent = dirname(parent)
  const work = await mkdtemp(join(parent, '.plinth-probe-'))
  try {
    if (identity) await chown(work, identity.uid, identity.gid)
    const backend = new SandboxBackend(support, identity)
    const result = await backend.run({
      argv: ['/bin/sh', '-c', 'test "$(id -u)" != 0 || test ! -r /etc/shadow; echo probe-ok'],
      cwd: work,
      env: buildExecEnv('/work'),
      timeoutMs: 10_000,
      limits: { ...defaultLimits, outputBytes: 4096 },
      network: false,
      mounts: { ro: [], rw: [] },
    })
    if (result.exitCode !== 0 || !result.stdout.includes('probe-ok')) {
      const stderr = result.stderr.trim().slice(0, 300)
      if (identity && /Can't find source path.*Permission denied/.test(stderr)) {
        return fail(
          `the sandbox user ${identity.name} cannot reach the work directories under ${parent} (a parent directory is not traversable); ` +
            'set exec.workRoot to a directory it can reach (e.g. /var/lib/plinth/work) or make the parents traversable (chmod o+x)',
          { bwrapVersion: version },
        )
      }
      return fail(
        `bwrap cannot create its sandbox here (exit ${result.exitCode ?? result.signal}): ${stderr || 'no output'}`,
        { bwrapVersion: version },
      )
    }
  } finally {
    await rm(work, { recursive: true, force: true })
  }
  return { result: { ok: true, reason: null, cgroups, user: identity?.name ?? null, bwrapVersion: version }, identity }
}
