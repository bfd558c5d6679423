import { access, mkdir, readFile, rmdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { ExecLimits } from './types.js'

/** Which cgroup interface this host offers Plinth. */
export type CgroupMode =
  | { kind: 'v2'; base: string }
  | { kind: 'v1'; bases: { pids: string; memory: string; cpu: string | null } }
  | { kind: 'none'; reason: string }

const mountPoint = '/sys/fs/cgroup'
const group = 'plinth'

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  )
}

/**
 * Finds a usable cgroup hierarchy and prepares Plinth's parent group in it: cgroup v2 with the pids,
 * memory and cpu controllers delegated to `plinth/`, or (hybrid hosts) the v1 `pids`, `memory` and
 * `cpu` hierarchies. `none` says why neither works (not root, read-only, controllers unavailable).
 */
export async function detectCgroups(root = mountPoint): Promise<CgroupMode> {
  try {
    if (await exists(join(root, 'cgroup.controllers'))) {
      const available = (await readFile(join(root, 'cgroup.controllers'), 'utf8')).split(/\s+/)
      const wanted = ['pids', 'memory', 'cpu'].filter((name) => available.includes(name))
      if (!wanted.includes('pids') || !wanted.includes('memory'))
        return { kind: 'none', reason: 'cgroup v2 without the pids and memory controllers' }
      const base = join(root, group)
      await mkdir(base, { recursive: true })
      const enable = wanted.map((name) => `+${name}`).join(' ')
      await writeFile(join(root, 'cgroup.subtree_control'), enable).catch(() => undefined)
      await writeFile(join(base, 'cgroup.subtree_control'), enable)
      return { kind: 'v2', base }
    }
    const pids = join(root, 'pids')
    const memory = join(root, 'memory')
    if ((await exists(join(pids, 'cgroup.procs'))) && (await exists(join(memory, 'cgroup.procs')))) {
      const cpuRoot = (await exists(join(root, 'cpu', 'cpu.cfs_quota_us')))
        ? join(root, 'cpu')
        : (await exists(join(root, 'cpu,cpuacct', 'cpu.cfs_quota_us')))
          ? join(root, 'cpu,cpuacct')
          : null
      const bases = { pids: join(pids, group), memory: join(memory, group), cpu: cpuRoot && join(cpuRoot, group) }
      for (const base of [bases.pids, bases.memory, bases.cpu]) if (base) await mkdir(base, { recursive: true })
      return { kind: 'v1', bases }
    }
    return { kind: 'none', reason: `no cgroup hierarchy with pids and memory under ${root}` }
  } catch (error) {
    return { kind: 'none', reason: `cannot create cgroups under ${root}: ${(error as Error).message}` }
  }
}

/**
 * One execution's cgroup: limits set before the program starts (it enters through `procsFiles`),
 * everything in it killed and the group removed afterwards.
 */
export class ExecCgroup {
  readonly #mode: Exclude<CgroupMode, { kind: 'none' }>
  readonly #dirs: string[]

  private constructor(mode: Exclude<CgroupMode, { kind: 'none' }>, dirs: string[]) {
    this.#mode = mode
    this.#dirs = dirs
  }

  static async create(
    mode: Exclude<CgroupMode, { kind: 'none' }>,
    id: string,
    limits: ExecLimits,
  ): Promise<ExecCgroup> {
    const memory = String(limits.memoryMb * 1024 * 1024)
    if (mode.kind === 'v2') {
      const dir = join(mode.base, id)
      await mkdir(dir)
      const cgroup = new ExecCgroup(mode, [dir])
      try {
        await writeFile(join(dir, 'pids.max'), String(limits.pids))
        await writeFile(join(dir, 'memory.max'), memory)
        await writeFile(join(dir, 'memory.swap.max'), '0').catch(() => undefined)
        await writeFile(join(dir, 'cpu.max'), '100000 100000').catch(() => undefined)
      } catch (error) {
        await cgroup.remove()
        throw error
      }
      return cgroup
    }
    const dirs = [
      join(mode.bases.pids, id),
      join(mode.bases.memory, id),
      ...(mode.bases.cpu ? [join(mode.bases.cpu, id)] : []),
    ]
    for (const dir of dirs) await mkdir(dir)
    const cgroup = new ExecCgroup(mode, dirs)
    try {
      await writeFile(join(dirs[0]!, 'pids.max'), String(limits.pids))
      await writeFile(join(dirs[1]!, 'memory.limit_in_bytes'), memory)
      // Swap accounting may be off; where it is on, memory + swap gets the same bound (no swap).
      await writeFile(join(dirs[1]!, 'memory.memsw.limit_in_bytes'), memory).catch(() => undefined)
      if (dirs[2]) {
        await writeFile(join(dirs[2], 'cpu.cfs_period_us'), '100000')
        await writeFile(join(dirs[2], 'cpu.cfs_quota_us'), '100000')
      }
    } catch (error) {
      await cgroup.remove()
      throw error
    }
    return cgroup
  }

  /** The files a process writes its pid to in order to enter the group. */
  get procsFiles(): string[] {
    return this.#dirs.map((dir) => join(dir, 'cgroup.procs'))
  }

  /** Pids still in the group. */
  async members(): Promise<number[]> {
    const text = await readFile(this.procsFiles[0]!, 'utf8').catch(() => '')
    return text.split('\n').filter(Boolean).map(Number)
  }

  /** Kills every process in the group and waits until none is left (at most `timeoutMs`). */
  async killAll(timeoutMs = 1000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs
    if (this.#mode.kind === 'v2') await writeFile(join(this.#dirs[0]!, 'cgroup.kill'), '1').catch(() => undefined)
    for (;;) {
      const pids = await this.members()
      if (pids.length === 0) return true
      // v1 has no cgroup.kill: kill what is there until nothing is (pids.max bounds a fork loop).
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {
          // already gone
        }
      }
      if (Date.now() > deadline) return false
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
  }

  async remove(): Promise<void> {
    for (const dir of this.#dirs) {
      for (let attempt = 0; attempt < 50; attempt++) {
        try {
          await rmdir(dir)
          break
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code
          if (code === 'ENOENT') break
          // EBUSY: a killed process is still being reaped.
          await new Promise((resolve) => setTimeout(resolve, 20))
        }
      }
    }
  }
}
