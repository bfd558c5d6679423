import { describe, expect, it } from 'vitest'
import type { Risk } from '../extension/index.js'
import { evaluateGate, type GateInput, type PermissionMode } from './gate.js'

const base: GateInput = { risk: 'low', confirm: false, mode: 'manual', hasAllowance: false, approvalPolicy: 'ask' }
const gate = (input: Partial<GateInput>) => evaluateGate({ ...base, ...input })

describe('evaluateGate: risk × permission mode', () => {
  it.each<[mode: PermissionMode, risk: Risk, decision: 'allow' | 'ask']>([
    ['manual', 'low', 'allow'],
    ['manual', 'medium', 'ask'],
    ['manual', 'high', 'ask'],
    ['risky', 'low', 'allow'],
    ['risky', 'medium', 'allow'],
    ['risky', 'high', 'ask'],
    ['full', 'low', 'allow'],
    ['full', 'medium', 'allow'],
    ['full', 'high', 'allow'],
  ])('%s mode, %s risk → %s', (mode, risk, decision) => {
    const result = gate({ mode, risk })
    expect(result.decision).toBe(decision)
    expect(result.reasons.length).toBeGreaterThan(0)
    if (decision === 'ask') expect(result.via).toBeUndefined()
    else expect(result.via).toBe(mode === 'full' ? 'mode' : 'risk')
  })

  it('says why it asks', () => {
    expect(gate({ mode: 'manual', risk: 'medium' }).reasons.join(' ')).toMatch(/medium/)
    expect(gate({ mode: 'risky', risk: 'high' }).reasons.join(' ')).toMatch(/high/)
    expect(gate({ mode: 'full', risk: 'high' }).reasons.join(' ')).toMatch(/full/)
  })
})

const modes: PermissionMode[] = ['manual', 'risky', 'full']
const risks: Risk[] = ['low', 'medium', 'high']
const everyModeAndRisk = modes.flatMap((mode) => risks.map((risk): [PermissionMode, Risk] => [mode, risk]))

describe('evaluateGate: confirm: true always asks', () => {
  it.each(everyModeAndRisk)('%s mode, %s risk', (mode, risk) => {
    const result = gate({ mode, risk, confirm: true })
    expect(result.decision).toBe('ask')
    expect(result.via).toBeUndefined()
    expect(result.reasons.join(' ')).toMatch(/confirm/)
  })

  it.each(everyModeAndRisk)('even with a session allowance: %s mode, %s risk', (mode, risk) => {
    expect(gate({ mode, risk, confirm: true, hasAllowance: true }).decision).toBe('ask')
  })
})

describe('evaluateGate: a session allowance', () => {
  it.each(everyModeAndRisk)('allows without asking: %s mode, %s risk', (mode, risk) => {
    const result = gate({ mode, risk, hasAllowance: true })
    expect(result).toMatchObject({ decision: 'allow', via: 'allowance' })
    expect(result.reasons.join(' ')).toMatch(/session/)
  })

  it('overrides high risk in manual mode', () => {
    expect(gate({ mode: 'manual', risk: 'high' }).decision).toBe('ask')
    expect(gate({ mode: 'manual', risk: 'high', hasAllowance: true }).decision).toBe('allow')
  })

  it('still allows under approvalPolicy dontAsk (nothing to ask)', () => {
    expect(gate({ risk: 'high', hasAllowance: true, approvalPolicy: 'dontAsk' })).toMatchObject({
      decision: 'allow',
      via: 'allowance',
    })
  })
})

describe('evaluateGate: approvalPolicy dontAsk', () => {
  const cases = [
    ...everyModeAndRisk.map(([mode, risk]): [PermissionMode, Risk, boolean] => [mode, risk, false]),
    ...everyModeAndRisk.map(([mode, risk]): [PermissionMode, Risk, boolean] => [mode, risk, true]),
  ]

  it.each(cases)('%s mode, %s risk, confirm %s: every ask becomes deny, allow stays allow', (mode, risk, confirm) => {
    const asked = gate({ mode, risk, confirm, approvalPolicy: 'ask' })
    const automated = gate({ mode, risk, confirm, approvalPolicy: 'dontAsk' })
    if (asked.decision === 'allow') {
      expect(automated).toEqual(asked)
    } else {
      expect(asked.decision).toBe('ask')
      expect(automated.decision).toBe('deny')
      expect(automated.via).toBeUndefined()
      // The original reasons are kept, and the denial says why.
      expect(automated.reasons).toEqual(expect.arrayContaining(asked.reasons))
      expect(automated.reasons.join(' ')).toMatch(/dontAsk/)
    }
  })

  it('never asks', () => {
    for (const [mode, risk] of everyModeAndRisk) {
      for (const confirm of [false, true]) {
        for (const hasAllowance of [false, true]) {
          expect(gate({ mode, risk, confirm, hasAllowance, approvalPolicy: 'dontAsk' }).decision).not.toBe('ask')
        }
      }
    }
  })
})

describe('evaluateGate: after a person rejected one of the run’s calls', () => {
  it.each<[mode: PermissionMode, risk: Risk, decision: 'allow' | 'ask']>([
    ['risky', 'low', 'allow'],
    ['risky', 'medium', 'ask'],
    ['risky', 'high', 'ask'],
    ['manual', 'medium', 'ask'],
    ['full', 'medium', 'allow'],
  ])('%s mode, %s risk → %s', (mode, risk, decision) => {
    expect(gate({ mode, risk, rejectedInRun: true }).decision).toBe(decision)
  })

  it('says why risky mode asks, and a session allowance still allows', () => {
    expect(gate({ mode: 'risky', risk: 'medium', rejectedInRun: true }).reasons.join(' ')).toMatch(/rejected/)
    expect(gate({ mode: 'risky', risk: 'medium', rejectedInRun: true, hasAllowance: true }).decision).toBe('allow')
  })
})
