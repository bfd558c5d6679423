/** Running model-generated code: the ExecBackend (direct | bwrap sandbox), work directories, allowlisted CLIs. */
export type { ExecBackend, ExecLimits, ExecOptions, ExecResult, ExecSpec } from './types.js'
export { defaultLimits } from './types.js'
export {
  DirectBackend,
  SandboxBackend,
  bwrapArgs,
  sandboxEtc,
  sandboxWorkdir,
  type HostSupport,
  type SandboxIdentity,
  type SandboxLaunch,
} from './backends.js'
export { buildSeccompFilter, deniedSyscalls, seccompSupported } from './seccomp.js'
export { detectCgroups, ExecCgroup, type CgroupMode } from './cgroups.js'
export { feedDescriptors, launchStdio, settleCleanups } from './process-runner.js'
export { buildExecEnv, isSecretName } from './exec-env.js'
export { detectHostSupport, lookupUser, probeSandbox, type ProbeResult } from './probe.js'
export { WorkDirectories, PathError, defaultDeniedSegments, type FileEntry } from './workdirs.js'
export { SharedWorkDirectories } from './shared-workdirs.js'
export { PostgresFileStore, ContentMissingError, type FileStore, type StoredWorkFile } from './file-store.js'
export { cliEnvironment } from './cli-env.js'
export { gateCliCall, probeCliVersion, validateCliSpec, type CliGate } from './cli-gate.js'
export {
  ExecService,
  SandboxUnavailableError,
  ExecBusyError,
  defaultExecSettings,
  type BackendName,
  type ExecSettings,
  type SandboxedLaunch,
} from './exec-service.js'
export {
  execCommandTimeoutMs,
  execKillGraceMs,
  fitExecResult,
  outputBytesFor,
  resolveOutputBytes,
  resultEnvelopeBytes,
} from './result-bounds.js'
export { defaultQuota, QuotaError, WorkQuota, type QuotaSettings } from './work-quota.js'
