import { randomUUID } from 'node:crypto'
import { lstat, readdir, readlink, realpath } from 'node:fs/promises'
import { ExecCgroup, type CgroupMode } from './cgroups.js'
import { enterCgroupScript, runProcess } from './process-runner.js'
import { buildSeccompFilter, seccompSupported } from './seccomp.js'
import type { ExecBackend, ExecOptions, ExecResult, ExecSpec } from './types.js'

/** Where the helper programs live (util-linux and bubblewrap, from the distribution). */
export const tools = {
  sh: '/bin/sh',
  prlimit: '/usr/bin/prlimit',
  setpriv: '/usr/bin/setpriv',
  bwrap: '/usr/bin/bwrap',
}

/** The work directory's path inside the sandbox. */
export const sandboxWorkdir = '/work'

/** What both backends share: cgroups when the host has them, and whether prlimit can be used. */
export interface HostSupport {
  cgroups: CgroupMode
  prlimit: boolean
  /** Whether setpriv can give a direct program PR_SET_PDEATHSIG (killed when the server dies). */
  pdeathsig?: boolean
}

/**
 * The wrapper chain in front of a program: enter the cgroup, then set rlimits. A long-lived program
 * (`persistent`) gets no RLIMIT_CPU, which counts its whole life: the cgroup's cpu.max bounds its rate.
 */
async function prelude(
  support: HostSupport,
  spec: Pick<ExecSpec, 'limits'>,
  persistent = false,
): Promise<{ argv: string[]; cgroup: ExecCgroup | null }> {
  const argv: string[] = []
  let cgroup: ExecCgroup | null = null
  if (support.cgroups.kind !== 'none') {
    // The pid tells operators (and tests) which server process an execution belongs to.
    cgroup = await ExecCgroup.create(support.cgroups, `exec-${process.pid}-${randomUUID()}`, spec.limits)
    argv.push(tools.sh, '-c', enterCgroupScript, 'plinth-exec', String(cgroup.procsFiles.length), ...cgroup.procsFiles)
  }
  if (support.prlimit) {
    // No RLIMIT_AS: it breaks V8 and WebAssembly; the cgroup bounds memory instead.
    argv.push(
      tools.prlimit,
      `--fsize=${spec.limits.fileSizeMb * 1024 * 1024}`,
      '--nofile=1024',
      '--core=0',
      ...(persistent ? [] : [`--cpu=${spec.limits.cpuSeconds}`]),
      '--',
    )
  }
  return { argv, cgroup }
}

/**
 * Runs the program as the server's own user, in its own process group (and cgroup where the host
 * has them), with the filtered environment and rlimits. For trusted deployments: a human approves
 * every run of an exec tool under this backend.
 */
export class DirectBackend implements ExecBackend {
  readonly name = 'direct' as const
  readonly #support: HostSupport

  constructor(support: HostSupport) {
    this.#support = support
  }

  async run(spec: ExecSpec, options: ExecOptions = {}): Promise<ExecResult> {
    const { argv, cgroup } = await prelude(this.#support, spec)
    // Killed if the server dies (kill -9 included): an execution whose call was answered `interrupted`
    // must not go on writing. (Kept across the wrappers' execs; what it started in the background is
    // not covered: the sandbox's pid namespace is.)
    const dieWithServer = this.#support.pdeathsig ? [tools.setpriv, '--pdeathsig', 'KILL', '--'] : []
    return runProcess(
      {
        argv: [...dieWithServer, ...argv, ...spec.argv],
        cwd: spec.cwd,
        env: spec.env,
        ...(spec.stdin !== undefined && { stdin: spec.stdin }),
        timeoutMs: spec.timeoutMs,
        outputBytes: spec.limits.outputBytes,
        cgroup,
      },
      options,
    )
  }
}

/** A sandboxed program ready to start: its command line (run from `/`) and what goes on its fd 3. */
export interface SandboxLaunch {
  argv: string[]
  /** What bwrap reads on fds 3, 4, …: the seccomp filter (none on an architecture without one), its arguments. */
  fds: Buffer[]
  /** Its cgroup, already limited; killed and removed by whoever ends the program. */
  cgroup: ExecCgroup | null
}

export interface SandboxIdentity {
  uid: number
  gid: number
  name: string
}

/**
 * Runs the program inside bubblewrap (docs/security.md#the-sandbox): new user, pid, ipc, uts, cgroup and
 * (unless allowed) network namespaces, no capabilities, its own session, killed with its parent; an
 * allowlisted read-only root (/usr, the /bin and /lib links, /etc), fresh /proc, minimal /dev, a
 * size-limited private /tmp, the work directory read-write at /work, extra mounts read-only or
 * read-write. When the server runs as root the program runs as the unprivileged `identity`. The cgroup
 * is entered before bwrap starts.
 */
export class SandboxBackend implements ExecBackend {
  readonly name = 'sandbox' as const
  readonly #support: HostSupport
  readonly #identity: SandboxIdentity | null
  readonly #tmpSizeMb: number

  constructor(support: HostSupport, identity: SandboxIdentity | null, options: { tmpSizeMb?: number } = {}) {
    this.#support = support
    this.#identity = identity
    this.#tmpSizeMb = options.tmpSizeMb ?? 64
  }

  async run(spec: ExecSpec, options: ExecOptions = {}): Promise<ExecResult> {
    const launch = await this.launch(spec)
    return runProcess(
      {
        argv: launch.argv,
        cwd: '/',
        env: spec.env,
        ...(spec.stdin !== undefined && { stdin: spec.stdin }),
        fds: launch.fds,
        timeoutMs: spec.timeoutMs,
        outputBytes: spec.limits.outputBytes,
        cgroup: launch.cgroup,
      },
      options,
    )
  }

  /**
   * How to start `spec.argv` in the sandbox: the whole command line (cgroup entry, rlimits, the sandbox
   * user, bwrap) and the seccomp filter the starter writes to fd 3. Shared by `run` and long-lived
   * programs (`persistent`: no RLIMIT_CPU), so both get the same isolation. The caller kills and
   * removes the cgroup when the program is over.
   */
  async launch(
    spec: Pick<ExecSpec, 'argv' | 'cwd' | 'limits' | 'network' | 'mounts'>,
    options: { persistent?: boolean } = {},
  ): Promise<SandboxLaunch> {
    const bwrap = await bwrapArgs(spec, this.#tmpSizeMb)
    const { argv, cgroup } = await prelude(this.#support, spec, options.persistent)
    if (this.#identity) {
      argv.push(
        tools.setpriv,
        `--reuid=${this.#identity.uid}`,
        `--regid=${this.#identity.gid}`,
        '--clear-groups',
        '--no-new-privs',
        '--',
      )
    }
    // The seccomp filter reaches bwrap on fd 3, through the wrappers (they keep inherited descriptors).
    // Its arguments come on the next descriptor (`--args`): bwrap is the sandbox's pid 1, and its command
    // line, readable in /proc/1/cmdline, would name the host paths it binds.
    const filter = seccompFilter()
    const args = Buffer.from(bwrap.map((arg) => `${arg}\0`).join(''))
    return {
      argv: [
        ...argv,
        tools.bwrap,
        ...(filter ? ['--seccomp', '3', '--args', '4'] : ['--args', '3']),
        '--',
        ...spec.argv,
      ],
      fds: filter ? [filter, args] : [args],
      cgroup,
    }
  }
}

let filterBytes: Buffer | null | undefined

/** The sandbox's seccomp filter for this machine, built once (null on an architecture without one). */
function seccompFilter(): Buffer | null {
  filterBytes ??= seccompSupported() ? buildSeccompFilter() : null
  return filterBytes
}

/**
 * What of the host's `/etc` a sandboxed program sees: what programs need to start and to name users,
 * hosts, locales, time zones and certificates — not credentials, package-manager or service
 * configuration (`npmrc`, `pip.conf`, `postgresql`, `ssh`, `cron*`, `sudoers`, …), nor `machine-id`.
 */
export const sandboxEtc = [
  'alternatives',
  'bash.bashrc',
  'ca-certificates',
  'ca-certificates.conf',
  'debian_version',
  'fonts',
  'gai.conf',
  'group',
  'host.conf',
  'hosts',
  'inputrc',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'locale.alias',
  'localtime',
  'magic',
  'magic.mime',
  'mime.types',
  'nsswitch.conf',
  'os-release',
  'passwd',
  'perl',
  'profile',
  'protocols',
  'python3',
  'resolv.conf',
  'rpc',
  'services',
  'shells',
  'ssl',
  'terminfo',
  'timezone',
  'xml',
]

let etcCache: { at: number; binds: Array<[string, string]> } | null = null

/**
 * The entries of `/etc` to mount — the list above, plus versioned runtime directories (python3.11,
 * java-17-…) — as [source, destination] pairs, sources realpath-resolved. Looked up at most once a
 * minute: this runs before every sandboxed execution.
 */
async function etcBinds(): Promise<Array<[string, string]>> {
  if (etcCache && Date.now() - etcCache.at < 60_000) return etcCache.binds
  const names = new Set(sandboxEtc)
  for (const name of await readdir('/etc').catch(() => [] as string[]))
    if (/^(python3\.\d+|java-\d+-openjdk)$/.test(name)) names.add(name)
  const binds: Array<[string, string]> = []
  for (const name of [...names].sort()) {
    const source = await realpath(`/etc/${name}`).catch(() => null)
    if (source) binds.push([source, `/etc/${name}`])
  }
  etcCache = { at: Date.now(), binds }
  return binds
}

/** The bwrap command line for a spec (everything before `--`). Source paths are realpath-resolved. */
export async function bwrapArgs(
  spec: Pick<ExecSpec, 'cwd' | 'network' | 'mounts'>,
  tmpSizeMb: number,
): Promise<string[]> {
  const args = [
    '--unshare-user',
    '--disable-userns',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
  ]
  if (!spec.network) args.push('--unshare-net')
  args.push('--cap-drop', 'ALL', '--new-session', '--die-with-parent', '--hostname', 'sandbox')
  args.push('--ro-bind', '/usr', '/usr')
  for (const path of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    const stat = await lstat(path).catch(() => null)
    if (!stat) continue
    if (stat.isSymbolicLink()) args.push('--symlink', await readlink(path), path)
    else args.push('--ro-bind', await realpath(path), path)
  }
  for (const [source, destination] of await etcBinds()) args.push('--ro-bind', source, destination)
  args.push('--proc', '/proc', '--dev', '/dev')
  args.push('--size', String(tmpSizeMb * 1024 * 1024), '--perms', '1777', '--tmpfs', '/tmp')
  args.push('--bind', await realpath(spec.cwd), sandboxWorkdir)
  for (const path of spec.mounts.ro) {
    const source = await realpath(path)
    args.push('--ro-bind', source, source)
  }
  for (const path of spec.mounts.rw) {
    const source = await realpath(path)
    args.push('--bind', source, source)
  }
  args.push('--chdir', sandboxWorkdir)
  return args
}
