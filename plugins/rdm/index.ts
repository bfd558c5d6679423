/**
 * The example plugin `rdm`: a few read-only diagnostics commands exposed to the model, a confirmed
 * draft writer, and a project member table that shares projects through a ProjectAuthz adapter.
 * It imports only the extension surface, like any plugin outside this repository would.
 */
import { definePlugin } from '../../src/extension/index.js'
import { registerBaseline } from './commands/baseline.js'
import { registerDraft } from './commands/draft.js'
import { registerMembers } from './commands/member.js'
import { registerPing } from './commands/ping.js'
import { registerTrace } from './commands/trace.js'
import { createMemberAuthz } from './members.js'

export default definePlugin({
  name: 'rdm',
  version: '1.0.0',
  surface: '^1.1.0',
  setup(registry, host) {
    registerPing(registry)
    registerTrace(registry)
    registerBaseline(registry)
    registerDraft(registry, host)
    registerMembers(registry, host)

    registry.registerProjectAuthz(createMemberAuthz(host.kv))

    registry.note(
      'The rdm tools diagnose incidents: rdm__trace shows a trace by id, rdm__baseline gives the normal value of a metric, rdm__draft__compose writes a draft into the project after a person confirms it.',
    )
    registry.addSkill({
      name: 'rdm-triage',
      description: 'Triage a production incident with traces and metric baselines, then write up the findings.',
      instructions: [
        '1. Ask for (or find in the conversation) the trace id of a failing request; call rdm__trace with it.',
        '2. Find the slowest spans and any span with status "error"; name the service and operation.',
        '3. Call rdm__baseline for latency, throughput and errors; compare what the trace shows with the baseline.',
        '4. State the most likely cause in one or two sentences and what would confirm it.',
        '5. Offer to write the findings up with rdm__draft__compose (a person must confirm the write); keep the title short.',
      ].join('\n'),
    })
  },
})
