import { describe, expect, it } from 'vitest'
import { buildSeccompFilter, deniedSyscalls } from './seccomp.js'

/** Runs a classic BPF seccomp program (the few opcodes the builder uses) on one system call. */
function evaluate(program: Buffer, nr: number, arch: number): number {
  let accumulator = 0
  for (let pc = 0; pc < program.length / 8;) {
    const code = program.readUInt16LE(pc * 8)
    const jt = program.readUInt8(pc * 8 + 2)
    const jf = program.readUInt8(pc * 8 + 3)
    const k = program.readUInt32LE(pc * 8 + 4)
    if (code === 0x20) accumulator = k === 0 ? nr : k === 4 ? arch : Number.NaN
    else if (code === 0x15) pc += accumulator === k ? jt : jf
    else if (code === 0x35) pc += accumulator >= k ? jt : jf
    else if (code === 0x06) return k
    else throw new Error(`unexpected opcode ${code}`)
    pc++
  }
  throw new Error('fell off the end of the program')
}

const allow = 0x7fff0000
const eperm = 0x00050001
const kill = 0x80000000

describe.each([
  ['x64', 0xc000003e, 0],
  ['arm64', 0xc00000b7, 1],
] as const)('the seccomp filter for %s', (arch, audit, index) => {
  const program = buildSeccompFilter(arch)

  it('denies every listed call with EPERM and allows the rest', () => {
    for (const [name, pair] of Object.entries(deniedSyscalls)) {
      if (pair[index] !== null) expect(evaluate(program, pair[index]!, audit), name).toBe(eperm)
    }
    // read, write, openat, execve, clone: what every program needs.
    for (const nr of arch === 'x64' ? [0, 1, 257, 59, 56] : [63, 64, 56, 221, 220])
      expect(evaluate(program, nr, audit)).toBe(allow)
  })

  it('kills a call made through another architecture’s ABI', () => {
    expect(evaluate(program, 0, 0x40000003)).toBe(kill) // i386
    if (arch === 'x64') expect(evaluate(program, 0x40000000 + 1, audit)).toBe(eperm) // x32
  })
})
