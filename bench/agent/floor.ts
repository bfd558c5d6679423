/**
 * The floor bench (`BENCH_ONLY=floor`): the agent round through a server that makes only the round's
 * I/O — its eight statements and two upstream calls, no logic (bench/servers/io-floor-server.ts) —
 * beside Plinth and raw fetch, interleaved round by round: how much of Plinth's overhead over raw fetch
 * is the waits any persisted round makes on this machine, and how much is Plinth's own work.
 */
import { ms } from './stats.js'
import { runPairedRoundBench } from './paired-rounds.js'

export async function runFloorBench(adminUrl: string | undefined): Promise<void> {
  await runPairedRoundBench(adminUrl, {
    title: 'floor bench',
    labels: { off: "the round's I/O alone", on: 'Plinth' },
    onEnv: {},
    offScript: 'bench/servers/io-floor-server.ts',
    verdict: (added) =>
      `Plinth's own work adds ${ms(added.p50Ms)} ms to the round's p50 and ${ms(added.cpuMs)} ms of server CPU to the I/O alone; target: overhead p50 ≤ 5 ms on pg, ≤ 8 ms on PGlite`,
  })
}
