/**
 * The sandbox's seccomp filter (docs/security.md, "the sandbox"), built here as a classic BPF program —
 * the bytes `bwrap --seccomp FD` loads — so no native library is needed. It allows everything except
 * the kernel interfaces a sandboxed program has no business with and that widen the kernel's attack
 * surface: io_uring, keyrings, bpf, userfaultfd, perf events, the mount family, kexec and modules,
 * file handles (`open_by_handle_at`, a classic container escape), clocks, swap, reboot, the kernel
 * log, accounting. Those answer EPERM, so programs that probe them (libuv probes io_uring) fall back. A
 * system call of another architecture's ABI (x32, or i386 through `int 0x80`) kills the process.
 */

/** Denied system calls by name: [x86_64 number, aarch64 number] (null where the call does not exist). */
export const deniedSyscalls: Record<string, [number | null, number | null]> = {
  io_uring_setup: [425, 425],
  io_uring_enter: [426, 426],
  io_uring_register: [427, 427],
  keyctl: [250, 219],
  add_key: [248, 217],
  request_key: [249, 218],
  bpf: [321, 280],
  userfaultfd: [323, 282],
  perf_event_open: [298, 241],
  mount: [165, 40],
  umount2: [166, 39],
  pivot_root: [155, 41],
  open_tree: [428, 428],
  move_mount: [429, 429],
  fsopen: [430, 430],
  fsconfig: [431, 431],
  fsmount: [432, 432],
  fspick: [433, 433],
  mount_setattr: [442, 442],
  kexec_load: [246, 104],
  kexec_file_load: [320, 294],
  init_module: [175, 105],
  finit_module: [313, 273],
  delete_module: [176, 106],
  open_by_handle_at: [304, 265],
  name_to_handle_at: [303, 264],
  lookup_dcookie: [212, 18],
  fanotify_init: [300, 262],
  quotactl: [179, 60],
  quotactl_fd: [443, 443],
  swapon: [167, 224],
  swapoff: [168, 225],
  reboot: [169, 142],
  syslog: [103, 116],
  acct: [163, 89],
  settimeofday: [164, 170],
  clock_settime: [227, 112],
  clock_adjtime: [305, 266],
  adjtimex: [159, 171],
  vhangup: [153, 58],
  iopl: [172, null],
  ioperm: [173, null],
  modify_ldt: [154, null],
  uselib: [134, null],
}

const architectures = {
  x64: { audit: 0xc000003e, index: 0 as const, x32Bit: 0x40000000 },
  arm64: { audit: 0xc00000b7, index: 1 as const, x32Bit: null },
}

// Classic BPF opcodes (linux/filter.h, linux/seccomp.h).
const loadWord = 0x20 // BPF_LD | BPF_W | BPF_ABS
const jumpEqual = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
const jumpAtLeast = 0x35 // BPF_JMP | BPF_JGE | BPF_K
const returnValue = 0x06 // BPF_RET | BPF_K
const retAllow = 0x7fff0000
const retErrno = 0x00050000
const retKillProcess = 0x80000000
const eperm = 1
// struct seccomp_data: int nr; __u32 arch; …
const offsetNr = 0
const offsetArch = 4

interface Instruction {
  code: number
  jt: number
  jf: number
  k: number
}

/** Whether this machine's architecture has a filter (otherwise the sandbox runs without one and says so). */
export function seccompSupported(arch: string = process.arch): boolean {
  return arch in architectures
}

/**
 * The filter for `arch` (Node's `process.arch`), as the bytes of a `struct sock_filter` array in the
 * machine's byte order.
 */
export function buildSeccompFilter(arch: string = process.arch): Buffer {
  const target = architectures[arch as keyof typeof architectures]
  if (!target) throw new Error(`no seccomp filter for ${arch}`)
  const numbers = [
    ...new Set(
      Object.values(deniedSyscalls).flatMap((pair) => (pair[target.index] === null ? [] : [pair[target.index]!])),
    ),
  ].sort((a, b) => a - b)
  // Layout: check arch → load nr → [x32 check] → one jump per denied call → allow | deny | kill.
  const program: Instruction[] = []
  const body = numbers.length + (target.x32Bit === null ? 0 : 1)
  program.push({ code: loadWord, jt: 0, jf: 0, k: offsetArch })
  // Wrong architecture: jump over the load, the checks and both returns to `kill`.
  program.push({ code: jumpEqual, jt: 0, jf: body + 3, k: target.audit })
  program.push({ code: loadWord, jt: 0, jf: 0, k: offsetNr })
  let remaining = body
  if (target.x32Bit !== null) {
    remaining--
    program.push({ code: jumpAtLeast, jt: remaining + 1, jf: 0, k: target.x32Bit })
  }
  for (const number of numbers) {
    remaining--
    // Jump over the rest of the checks and `allow` to `deny`.
    program.push({ code: jumpEqual, jt: remaining + 1, jf: 0, k: number })
  }
  program.push({ code: returnValue, jt: 0, jf: 0, k: retAllow })
  program.push({ code: returnValue, jt: 0, jf: 0, k: retErrno | eperm })
  program.push({ code: returnValue, jt: 0, jf: 0, k: retKillProcess })
  const bytes = Buffer.alloc(program.length * 8)
  program.forEach((instruction, index) => {
    if (instruction.jt > 255 || instruction.jf > 255) throw new Error('seccomp filter: a jump is out of range')
    bytes.writeUInt16LE(instruction.code, index * 8)
    bytes.writeUInt8(instruction.jt, index * 8 + 2)
    bytes.writeUInt8(instruction.jf, index * 8 + 3)
    bytes.writeUInt32LE(instruction.k >>> 0, index * 8 + 4)
  })
  return bytes
}
