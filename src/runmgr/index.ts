/** The run manager: the agent's ReAct loop, run state machine, context budget, recovery. */
export { RunManager, type RunManagerOptions, type CreateRunInput, type RunObserver } from './run-manager.js'
export { RunRequestError } from './run-errors.js'
export { type RunQuota } from './run-quotas.js'
export { type RetentionReport, type RetentionSettings } from './retention-sweeper.js'
export {
  defaultCompactionSettings,
  defaultCompactionPrompt,
  CompactionError,
  type CompactionSettings,
} from './compaction.js'
export { buildModelMessages, trimToBudget, estimateTokens } from './history.js'
export { resolveClientTools, proposeCommandTool, toolSchemaProblem } from './client-tools.js'
export { ProjectService, type ProjectServiceDeps } from './project-service.js'
export { ConversationService, type ConversationWithRun } from './conversation-service.js'
export { RunQueries } from './run-queries.js'
export { usageGroupings, type UsageFilter, type UsageGrouping } from '../store/index.js'
export { commandTools } from './tool-table.js'
