/** The command bus: one dispatch path, HITL decisions, the audit envelope, tool projection. */
export { hashParams, toDecisionView } from './outcomes.js'
export { CommandBus, type CommandBusOptions } from './command-bus.js'
export { auditClientCall, type ClientCallAudit } from './client-call-audit.js'
export { CallLedger, clientCallAudit, type CallLedgerOptions, type LedgerObserver, type RunEnd } from './call-ledger.js'
export {
  CommandCatalog,
  RegistrationError,
  alwaysAsks,
  catalogRisk,
  type CoreContext,
  type MountedCommand,
  type RegisteredCommand,
} from './command-catalog.js'
export { ProjectAccess } from './project-access.js'
export type { DecisionListener } from './decision-feed.js'
export { createPluginKv, createPluginLogger } from './plugin-kv.js'
export { evaluateGate, type GateInput, type GateResult, type PermissionMode } from './gate.js'
export { classifyCommandLine, type CommandLineRisk, type MatchedRule } from './risk-rules.js'
export { redact, looksSecret } from './redact.js'
export { parseSlash, type SlashParse } from './slash-parser.js'
export { projectToolName, commandIdPattern, toolNamePattern } from './tool-name.js'
export { listAuditEnvelopes, verifyAuditChain, type AuditEnvelopeView, type ChainVerdict } from './audit-query.js'
export type {
  BusError,
  DecideOutcome,
  DecisionAnswer,
  DecisionAnswerDetail,
  DecisionView,
  DispatchOutcome,
  DispatchRequest,
  Params,
} from './bus-types.js'
export { registerCoreCommands, knowledgeHitJson } from './core-commands.js'
export { registerMemoryCommands, memoryJson } from './memory-commands.js'
export { toolImageKeeper, type ToolImage } from './exec-images.js'
export { DrivenCall, type RunCall } from './driven-call.js'
export { callAnswer, answerAfterFence, outcomeAnswer, type CallAnswer, type CallRun } from './call-answer.js'
export { capForModel } from './tool-output.js'
export { registerExecCommands, registerCliTools, execModelText, type ExecCommandDeps } from './exec-commands.js'
export { defaultResultMaxBytes } from './handler-runner.js'
