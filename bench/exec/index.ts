/**
 * The exec bench (`BENCH_ONLY=exec npm run bench`): p50/p95 of `/bin/true`, `python3 -c 'print(1)'`
 * and `node -e 0` through the direct backend and the bubblewrap sandbox, interleaved in one run, and
 * the sandbox's overhead (sandbox − direct). Both backends include their per-exec cgroup and rlimits.
 *
 * Env: BENCH_EXEC_RUNS (default 100, after 10 warm-up).
 */
import { chmod, chown, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  buildExecEnv,
  defaultLimits,
  detectHostSupport,
  DirectBackend,
  probeSandbox,
  SandboxBackend,
  type ExecBackend,
} from '../../src/exec/index.js'
import { ms, summarize, table } from '../agent/stats.js'

const programs: Array<[string, string[]]> = [
  ['/bin/true', ['/bin/true']],
  ["python3 -c 'print(1)'", ['python3', '-c', 'print(1)']],
  ['node -e 0', ['node', '-e', '0']],
]

export async function runExecBench(): Promise<void> {
  const runs = Number(process.env.BENCH_EXEC_RUNS ?? 100)
  const support = await detectHostSupport()
  const parent = await mkdtemp(join(tmpdir(), 'plinth-bench-exec-'))
  await chmod(parent, 0o711)
  try {
    const probe = await probeSandbox({
      sandboxUser: process.env.PLINTH_SANDBOX_USER ?? 'plinth-sandbox',
      requireCgroups: true,
      support,
      workRoot: parent,
    })
    const work = join(parent, 'work')
    await import('node:fs/promises').then((fs) => fs.mkdir(work))
    if (probe.identity) await chown(work, probe.identity.uid, probe.identity.gid)
    const backends: Array<[string, ExecBackend]> = [['direct', new DirectBackend(support)]]
    if (probe.result.ok) backends.push(['sandbox', new SandboxBackend(support, probe.identity)])
    console.log(
      `exec bench: ${runs} runs per program and backend after 10 warm-up, interleaved; cgroups ${support.cgroups.kind}; ` +
        (probe.result.ok
          ? `sandbox as ${probe.result.user ?? 'the server user'}`
          : `sandbox unavailable: ${probe.result.reason}`),
    )
    const timings = new Map<string, number[]>()
    for (let index = 0; index < runs + 10; index++) {
      for (const [label, argv] of programs) {
        for (const [name, backend] of backends) {
          const spec = {
            argv,
            cwd: work,
            env: buildExecEnv(name === 'sandbox' ? '/work' : work),
            timeoutMs: 30_000,
            limits: defaultLimits,
            network: false,
            mounts: { ro: [], rw: [] },
          }
          const started = performance.now()
          const result = await backend.run(spec)
          const elapsed = performance.now() - started
          if (result.exitCode !== 0) throw new Error(`${label} under ${name} failed: ${result.stderr.slice(0, 200)}`)
          if (index >= 10) timings.set(`${label}|${name}`, [...(timings.get(`${label}|${name}`) ?? []), elapsed])
        }
      }
    }
    const rows = programs.map(([label]) => {
      const direct = summarize(timings.get(`${label}|direct`) ?? [])
      const sandbox = timings.has(`${label}|sandbox`) ? summarize(timings.get(`${label}|sandbox`)!) : null
      return [
        label,
        ms(direct.p50),
        ms(direct.p95),
        sandbox ? ms(sandbox.p50) : 'n/a',
        sandbox ? ms(sandbox.p95) : 'n/a',
        sandbox ? ms(sandbox.p50 - direct.p50) : 'n/a',
      ]
    })
    console.log(table(['exec (ms)', 'direct p50', 'p95', 'sandbox p50', 'p95', 'overhead p50'], rows))
    console.log(
      '  wall time of ExecBackend.run (spawn → exit → cleanup), cgroup and prlimit included on both; goal: sandbox overhead ≤ 10 ms p50',
    )
  } finally {
    await rm(parent, { recursive: true, force: true })
  }
}
