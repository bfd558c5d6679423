import type { Risk } from '../extension/index.js'

export type PermissionMode = 'manual' | 'risky' | 'full'

export interface GateInput {
  risk: Risk
  /** The command always asks. */
  confirm: boolean
  mode: PermissionMode
  /** A live session allowance covers this exact command + params. */
  hasAllowance: boolean
  /** `dontAsk`: nobody is there to answer, so anything that would ask is denied. */
  approvalPolicy: 'ask' | 'dontAsk'
  /**
   * A person rejected one of this run's calls: in `risky` mode the model's later calls ask as in
   * `manual`, so that a reworded call comes back to a person (docs/guides/commands-and-decisions.md).
   */
  rejectedInRun?: boolean
}

export interface GateResult {
  decision: 'allow' | 'ask' | 'deny'
  reasons: string[]
  /** What let it through without asking, for the audit envelope. */
  via?: 'risk' | 'allowance' | 'mode'
}

/**
 * The risk gate (docs/architecture.md#the-command-bus), a pure function. `confirm` always asks; an
 * allowance passes anything else (even high risk); `full` passes everything; `risky` asks only for
 * high; `manual` asks for medium and high.
 */
export function evaluateGate(input: GateInput): GateResult {
  const ask = (reasons: string[]): GateResult =>
    input.approvalPolicy === 'dontAsk'
      ? {
          decision: 'deny',
          reasons: [...reasons, 'approvalPolicy is dontAsk: nobody can confirm, so the call is denied'],
        }
      : { decision: 'ask', reasons }
  if (input.confirm) return ask(['the command always asks for confirmation'])
  if (input.hasAllowance)
    return { decision: 'allow', reasons: ['allowed for this session by an earlier approval'], via: 'allowance' }
  if (input.mode === 'full') return { decision: 'allow', reasons: ['permission mode is full'], via: 'mode' }
  if (input.risk === 'high') return ask(['high risk'])
  if (input.risk === 'medium' && input.mode === 'manual') return ask(['medium risk in manual permission mode'])
  if (input.risk === 'medium' && input.mode === 'risky' && input.rejectedInRun)
    return ask(['medium risk: a person rejected a call earlier in this run, so risky mode asks as manual does'])
  return { decision: 'allow', reasons: [`${input.risk} risk in ${input.mode} permission mode`], via: 'risk' }
}
