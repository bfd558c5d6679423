// A conversation: the transcript, the composer, the live run (text, phases, tool calls with their
// output, approval cards, client tools, cancel) and the conversation's audit.
import { query } from './api.js'
import { h, jsonWithEscapedControls, literal, mount, pretty, when } from './dom.js'
import { renderMarkdown } from './markdown.js'
import { follow } from './stream.js'

const phases = {
  thinking: 'Thinking…',
  tool_called: 'Calling tools…',
  tool_running: 'Running tools…',
  tool_done: 'Tools done, thinking…',
  finalizing: 'Writing the answer…',
}

export async function renderConversation(main, conversationId, context) {
  const { api, setCrumbs, showError, onCleanup } = context
  const conversation = await api.get(`/api/conversations/${conversationId}`)
  const project = await api.get(`/api/projects/${conversation.projectId}`).catch(() => null)
  setCrumbs(
    { label: 'Projects', href: '#/' },
    { label: project?.name ?? 'Project', href: `#/projects/${conversation.projectId}` },
    { label: conversation.title || 'Conversation' },
  )

  const log = h('div.log', { id: 'log', 'aria-live': 'polite' })
  const runStatus = h('div.run-status', { id: 'run-status', role: 'status' })
  const cancel = h('button.danger', { id: 'cancel', hidden: true }, 'Cancel run')
  const input = h('textarea', {
    id: 'composer',
    name: 'input',
    rows: 3,
    placeholder: 'Message the agent… (Enter sends, Shift+Enter for a new line)',
    'aria-label': 'Message',
  })
  const send = h('button', { type: 'submit', id: 'send' }, 'Send')
  // One page of the largest size: a server configures a handful of models, not hundreds.
  const models = await api.get('/api/models?limit=200').catch(() => ({ items: [] }))
  const model = h(
    'select',
    { name: 'model', 'aria-label': 'Model' },
    h('option', { value: '' }, 'default model'),
    (models.items ?? []).map((item) => h('option', { value: item.id }, item.id)),
  )
  const mode = h(
    'select',
    { name: 'permissionMode', 'aria-label': 'Permission mode', title: 'Which commands need your approval' },
    ['manual', 'risky', 'full'].map((name) =>
      h('option', { value: name, selected: conversation.permissionMode === name }, `approvals: ${name}`),
    ),
  )
  mode.onchange = () =>
    api.patch(`/api/conversations/${conversationId}`, { permissionMode: mode.value }).catch(showError)
  const composer = h('form.composer', input, h('div.row', model, mode, send, cancel))
  const audit = h('div', { id: 'audit' })
  const tabs = h(
    'div.tabs',
    h('button.tab.active', { onclick: (event) => showTab(event, chat) }, 'Chat'),
    h(
      'button.tab',
      {
        id: 'audit-tab',
        onclick: (event) => showTab(event, audit, () => renderAudit(audit, api, conversationId, context.me)),
      },
      'Audit',
    ),
  )
  const chat = h('div', log, runStatus, composer)
  audit.hidden = true
  const showTab = (event, panel, load) => {
    for (const tab of tabs.children) tab.classList.toggle('active', tab === event.target)
    chat.hidden = panel !== chat
    audit.hidden = panel !== audit
    load?.().catch(showError)
  }
  mount(main, h('h1', conversation.title || 'Conversation'), tabs, chat, audit)

  const view = new ChatView(log, api, showError, context.me, conversationId)
  let stream = null
  let activeRun = null
  // Between runs, the conversation's own stream: a run started elsewhere (another tab, plinth chat, a
  // schedule) is followed here too. It resumes after the last event of the run watched before it.
  let idle = null
  let left = false
  // Runs this page has followed to their end: their events on the conversation stream are not news.
  const followed = new Set()
  onCleanup(() => {
    left = true
    stream?.close()
    idle?.close()
  })
  const followIdle = (after, { fromStart = false } = {}) => {
    idle?.close()
    idle = null
    // Without a point to resume from, the stream would replay the whole conversation: stay put.
    if (left || (!(after > 0) && !fromStart)) return
    idle = follow(api, `/api/conversations/${conversationId}/events`, {
      after: fromStart ? 0 : after,
      onEvent: (type, data) => {
        // Any event of a run not followed yet: a run queued behind the last one has its run.created
        // before that run's end, so it is known by what it does next.
        const runId = data.run?.id ?? data.runId
        if (runId && !activeRun && !followed.has(runId)) watch(runId)
      },
      onState: (state) => {
        context.notice(state === 'reconnecting' ? 'Connection lost — reconnecting…' : null, 'warn')
        if (state === 'revoked') revoked()
      },
    })
  }

  // A stream closed for access: the token itself may be gone (revoked, user disabled), and then the
  // console signs out (the API's 401 does it); otherwise only this conversation went, and it says so.
  const revoked = () => {
    context.notice('This stream was closed: your access was revoked.', 'error')
    api.request('GET', '/api/me').catch(() => {})
  }

  const setActive = (run) => {
    activeRun = run
    const busy = Boolean(run)
    send.disabled = busy
    cancel.hidden = !busy
    input.disabled = busy
  }
  const watch = (runId) => {
    if (activeRun?.id === runId) return
    idle?.close()
    idle = null
    stream?.close()
    setActive({ id: runId })
    runStatus.textContent = 'Connecting…'
    const watched = follow(api, `/api/runs/${runId}/events`, {
      after: 0,
      onEvent: (type, data) => {
        view.apply(type, data, runId)
        if (type === 'run.status') runStatus.textContent = statusText(data)
        if (type === 'decision.resolved' && data.outcome === 'approved') runStatus.textContent = 'Approved: running it…'
        if (type === 'run.completed') runStatus.textContent = 'Completed.'
        if (type === 'run.failed') runStatus.textContent = endedText('failed', data.error)
        if (type === 'run.cancelled') runStatus.textContent = endedText('cancelled', null, data.reason)
        if (type === 'run.expired') runStatus.textContent = endedText('expired')
      },
      onState: (state) => {
        context.notice(state === 'reconnecting' ? 'Connection lost — reconnecting…' : null, 'warn')
        if (state === 'live' && runStatus.textContent === 'Connecting…') runStatus.textContent = 'Connected.'
        if (state === 'ended' || state === 'revoked') {
          setActive(null)
          input.focus()
        }
        if (state === 'ended') {
          followed.add(runId)
          followIdle(watched.lastId)
        }
        if (state === 'revoked') {
          runStatus.textContent = 'Stream closed: access revoked.'
          revoked()
        }
      },
    })
    stream = watched
  }

  cancel.onclick = async () => {
    if (!activeRun) return
    cancel.disabled = true
    try {
      await api.call((client) => client.runs.cancel(activeRun.id))
    } catch (error) {
      showError(error)
    } finally {
      cancel.disabled = false
    }
  }
  input.addEventListener('keydown', (event) => {
    // Enter that picks an input method's candidate (Chinese, Japanese, …) is not a send.
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault()
      composer.requestSubmit()
    }
  })
  composer.onsubmit = async (event) => {
    event.preventDefault()
    const text = input.value.trim()
    if (!text || activeRun) return
    send.disabled = true
    try {
      const run = await api.call((client) =>
        client.runs.create(conversationId, { input: text, ...(model.value && { model: model.value }) }),
      )
      input.value = ''
      watch(run.id)
    } catch (error) {
      send.disabled = false
      if (error.code === 'run_active' && error.problem?.activeRunId) watch(error.problem.activeRunId)
      showError(error)
    }
  }

  // The last run is read before the transcript: a run that starts (and even ends) between the two reads
  // is then after the point the conversation's stream resumes from, so it is followed, not missed.
  const last = conversation.activeRunId
    ? null
    : (await api.get(`/api/conversations/${conversationId}/runs${query({ limit: 1 })}`).catch(() => null))?.items?.[0]
  const ended = (run) => ['completed', 'failed', 'cancelled', 'expired'].includes(run.status)
  const active = conversation.activeRunId ?? (last && !ended(last) ? last.id : null)
  // The transcript, without the active run's messages: its stream replays them from its start.
  const messages = await loadTranscript(api, conversationId)
  view.transcript(messages.filter((message) => !active || message.runId !== active))
  await view.loadCompactions()
  if (active) watch(active)
  else {
    // Reopened after the fact: a last run that did not complete says how it ended, and why.
    if (last && ['failed', 'cancelled', 'expired'].includes(last.status)) {
      runStatus.textContent = endedText(last.status, last.error, last.cancelReason)
      runStatus.dataset.runStatus = last.status
    }
    input.focus()
    // The stream resumes after the last run's end (a conversation without runs: from its start, which
    // holds little); what it replays of runs the transcript already shows is not shown twice.
    if (last) {
      followed.add(last.id)
      followIdle(await lastEventOf(api, last.id, onCleanup))
    } else followIdle(0, { fromStart: true })
  }
}

/** The id of an ended run's last event (its stream replays it and ends); 0 when it cannot be read. */
function lastEventOf(api, runId, onCleanup) {
  return new Promise((resolve) => {
    const replay = follow(api, `/api/runs/${runId}/events`, {
      after: 0,
      onEvent: () => {},
      onState: (state) => {
        if (state === 'ended') resolve(replay.lastId)
        if (state === 'revoked' || state === 'closed') resolve(0)
      },
    })
    onCleanup(() => replay.close())
  })
}

/** The images a tool result names: an execution's `images`, an MCP result's image items kept as files. */
function resultImages(output) {
  if (!output || typeof output !== 'object') return []
  const listed = [
    ...(Array.isArray(output.images) ? output.images : []),
    ...(Array.isArray(output.content) ? output.content.filter((item) => item?.type === 'image') : []),
  ]
  return listed.filter((image) => typeof image?.path === 'string').slice(0, 4)
}

/** How a run ended, with its reason: the same words live and when the conversation is reopened. */
function endedText(status, error, reason) {
  if (status === 'failed')
    return `Failed: ${error?.message ?? error?.code ?? 'unknown error'}${error?.code && error?.message ? ` (${error.code})` : ''}`
  if (status === 'cancelled') return `Cancelled${reason && reason !== 'cancelled' ? ` (${reason})` : ''}.`
  return 'Expired: nobody answered in time.'
}

function statusText(data) {
  if (data.status === 'requires_action') {
    const waiting = data.requiredAction
    // Everything asked is answered: the approved calls run, then the run goes on.
    if (waiting && !waiting.decisions?.length && !waiting.toolOutputs?.length) return 'Running what was approved…'
    return 'Waiting for you: answer the card above.'
  }
  if (data.status === 'queued') return 'Queued behind another run…'
  if (data.status === 'running') return phases[data.phase] ?? 'Running…'
  return data.status
}

async function loadTranscript(api, conversationId) {
  const all = []
  let cursor = null
  do {
    const page = await api.get(`/api/conversations/${conversationId}/messages${query({ limit: 200, cursor })}`)
    all.push(...page.items)
    cursor = page.nextCursor
  } while (cursor && all.length < 2000)
  return all
}

/** The chat log, keyed by message, call and decision ids: replayed or repeated events never duplicate anything. */
class ChatView {
  constructor(log, api, showError, me, conversationId) {
    this.me = me
    this.conversationId = conversationId
    this.log = log
    this.api = api
    this.showError = showError
    this.messages = new Map()
    this.calls = new Map()
    this.decisions = new Map()
  }

  transcript(messages) {
    for (const message of messages) {
      if (message.role === 'tool') {
        const call = [...this.calls.values()].find(
          (candidate) => candidate.callId === message.toolCallId || candidate.providerCallId === message.toolCallId,
        )
        // The call's own outcome and raw output, as tool_call.completed showed them live.
        if (call)
          call.setResult(
            message.toolStatus ?? (message.status === 'completed' ? 'ok' : message.status),
            message.toolStatus ? message.toolOutput : message.content,
          )
        continue
      }
      if (message.role === 'system') continue
      const entry = this.message(message.id, message.role)
      entry.complete(message.content ?? '', message.status, message.parts)
      for (const toolCall of message.toolCalls ?? []) {
        const call = this.call(toolCall.callId, {
          name: toolCall.name,
          providerCallId: toolCall.providerCallId,
          args: parseArgs(toolCall.arguments),
        })
        call.setStatus('done')
      }
    }
    this.scroll()
  }

  /** The conversation's compactions, each shown where the messages it summarises end. */
  async loadCompactions() {
    const page = await this.api
      .get(`/api/conversations/${this.conversationId}/compactions${query({ limit: 200 })}`)
      .catch(() => ({ items: [] }))
    for (const item of page.items) this.compaction(item)
  }

  compaction(item) {
    if (this.log.querySelector(`[data-compaction-id="${item.id}"]`)) return
    const el = h(
      'details.compaction',
      { dataset: { compactionId: item.id } },
      h('summary', `Compacted: the ${item.messageCount} messages above are summarised for the model (${item.model})`),
      h('div.text', item.summary),
    )
    // Before the first message after the range (ids sort by time), else at the end.
    const next = [...this.log.querySelectorAll('[data-message-id]')].find(
      (candidate) => candidate.dataset.messageId > item.throughMessageId,
    )
    if (next) this.log.insertBefore(el, next)
    else this.log.append(el)
  }

  message(id, role) {
    let entry = this.messages.get(id)
    if (!entry) {
      const image = (part) => this.image(part)
      const text = h('div.text')
      const el = h(
        `div.msg.${role}`,
        { dataset: { messageId: id } },
        h('div.role', role === 'user' ? 'you' : role),
        text,
      )
      entry = {
        el,
        final: false,
        text: '',
        append(delta) {
          if (this.final) return
          this.text += delta
          text.textContent = this.text
          el.classList.add('streaming')
        },
        complete(content, status, parts) {
          if (!this.final)
            for (const part of parts ?? []) {
              if (part.type === 'image') el.append(image(part))
              if (part.type === 'file')
                el.append(h('div.attached-file', { title: part.path ?? part.filename }, `📄 ${part.filename}`))
            }
          this.final = true
          this.text = content ?? ''
          // The model's finished answer is Markdown; what people type stays plain text.
          if (role === 'assistant') {
            text.replaceChildren(renderMarkdown(this.text))
            text.classList.add('md')
          } else text.textContent = this.text
          el.classList.remove('streaming')
          // A turn that only called tools has no text: its tool cards say it all.
          el.classList.toggle('empty', this.text === '' && role === 'assistant')
          // Once: a replayed run completes a message the transcript already showed.
          if (status && status !== 'completed' && this.statusShown !== status) {
            this.statusShown = status
            el.append(h('div.muted.small', `(${status})`))
          }
        },
      }
      this.messages.set(id, entry)
      this.log.append(el)
    }
    return entry
  }

  /** An image of a message: a file of the conversation, fetched with the token (no token in any URL). */
  image(part) {
    const img = h('img.attached', { alt: part.path, title: `${part.path} (${part.width}×${part.height})` })
    const path = part.path.split('/').map(encodeURIComponent).join('/')
    fetch(`/api/conversations/${this.conversationId}/files/${path}`, {
      headers: { authorization: `Bearer ${this.api.token}` },
    })
      .then((response) => (response.ok ? response.blob() : null))
      .then((blob) => {
        if (blob) img.src = URL.createObjectURL(blob)
      })
      .catch(() => {})
    return img
  }

  call(callId, info) {
    let call = this.calls.get(callId)
    if (call) return call
    const image = (part) => this.image(part)
    const status = h('span.tag.call-status', 'pending')
    const live = h('pre.live', { hidden: true })
    const result = h('pre.result', { hidden: true })
    const extra = h('div')
    const el = h(
      'div.call',
      { dataset: { callId } },
      h(
        'div.call-head',
        h('span.call-name', info.name),
        info.kind === 'client' ? h('span.tag', 'client tool') : null,
        info.risk ? riskTag(info.risk) : null,
        status,
      ),
      info.args !== undefined ? h('pre.args', pretty(info.args)) : null,
      info.matchedRules?.length
        ? h(
            'div.rules',
            'matched rules: ',
            info.matchedRules.map((rule) => literal(rule.description ?? rule.id)).join('; '),
          )
        : null,
      live,
      result,
      extra,
    )
    call = {
      callId,
      providerCallId: info.providerCallId,
      kind: info.kind,
      el,
      extra,
      setStatus(text) {
        status.textContent = text
        status.className = `tag call-status status-${text.replace(/\s+/g, '-')}`
      },
      output(text) {
        live.hidden = false
        live.textContent += literal(text)
      },
      setResult(outcome, output) {
        this.setStatus(outcome)
        result.hidden = false
        result.textContent = pretty(output)
        // Images the result names (a plot an execution wrote, an MCP tool's image), once.
        if (!el.querySelector('img.attached'))
          for (const part of resultImages(output).reverse()) result.after(image(part))
      },
    }
    this.calls.set(callId, call)
    this.log.append(el)
    return call
  }

  apply(type, data, runId) {
    switch (type) {
      case 'message.created':
        this.message(data.messageId, data.role)
        break
      case 'message.delta':
        this.message(data.messageId, 'assistant').append(data.text)
        break
      case 'message.completed':
        this.message(data.messageId, 'assistant').complete(data.content, data.status, data.parts)
        break
      case 'tool_call.created':
        this.call(data.callId, data).setStatus('pending')
        break
      case 'tool_call.started': {
        const call = this.calls.get(data.callId)
        if (!call) break
        call.setStatus(call.kind === 'client' ? 'awaiting output' : 'running')
        if (call.kind === 'client') this.clientForm(call, runId)
        break
      }
      case 'tool_call.output':
        this.calls.get(data.callId)?.output(data.text)
        break
      case 'tool_call.completed': {
        const call = this.calls.get(data.callId)
        if (!call) break
        call.setResult(data.status, data.output)
        // The answer form goes; a decision card stays, showing how it was decided.
        call.extra.querySelector('.client-answer')?.remove()
        break
      }
      case 'decision.required':
        this.decisionCard(data)
        if (data.callId) this.calls.get(data.callId)?.setStatus('awaiting approval')
        break
      case 'decision.resolved': {
        const decision = this.decisions.get(data.decisionId)
        decision?.resolved(data.outcome, data.by, data.scope, data.reply)
        const call = decision?.callId ? this.calls.get(decision.callId) : undefined
        if (call && data.outcome === 'approved') call.setStatus('running')
        break
      }
      case 'conversation.compacted':
        void this.loadCompactions()
        break
      case 'memory.recalled':
        if (this.noted(type, runId)) break
        this.log.append(
          h(
            'div.note',
            `Recalled ${data.memories.length} remembered fact(s): ${data.memories.map((memory) => memory.key).join(', ')}`,
          ),
        )
        break
      case 'knowledge.injected':
        if (this.noted(type, runId)) break
        this.log.append(h('div.note', `Using project knowledge: ${data.items.map((item) => item.title).join(', ')}`))
        break
      default:
        break
    }
    this.scroll()
  }

  /** Whether a run's note of this kind is already shown (a run replayed again shows it once). */
  noted(type, runId) {
    this.notes ??= new Set()
    const key = `${type}:${runId}`
    if (this.notes.has(key)) return true
    this.notes.add(key)
    return false
  }

  decisionCard(data) {
    if (this.decisions.has(data.decisionId)) return
    const buttons = h('div.row')
    // Edit-and-approve or respond-instead: a text area and its send button, opened by their buttons.
    const reply = h('div.decision-reply')
    const state = h('div.decision-state', { role: 'status' })
    const card = h(
      'div.decision',
      { dataset: { decisionId: data.decisionId } },
      h('div.call-head', h('strong', 'Approval needed: '), h('span.call-name', data.commandId), riskTag(data.risk)),
      data.preview ? h('pre.preview', literal(data.preview)) : null,
      data.reasons?.length
        ? h(
            'ul.reasons',
            data.reasons.map((reason) => h('li', reason)),
          )
        : null,
      h('details', h('summary', 'parameters'), h('pre.args', pretty(data.params))),
      h('div.muted.small', `expires ${when(data.expiresAt)}`),
      buttons,
      reply,
      state,
    )
    const entry = {
      callId: data.callId,
      resolved: (outcome, by, scope, replied) => {
        buttons.replaceChildren()
        reply.replaceChildren()
        card.classList.add(`resolved-${outcome}`)
        const who = by === this.me.id ? 'you' : by
        const how =
          replied === 'edit'
            ? 'Approved with edited arguments'
            : replied === 'respond'
              ? 'Answered instead of running'
              : outcome === 'approved'
                ? `Approved${scope === 'session' ? ' for this session' : ''}`
                : outcome === 'rejected'
                  ? 'Rejected'
                  : 'Expired'
        state.textContent = `${how}${who ? ` by ${who}` : ''}.`
      },
    }
    const controls = () => [...buttons.querySelectorAll('button'), ...reply.querySelectorAll('button')]
    const answer = async (decision, detail = {}) => {
      for (const button of controls()) button.disabled = true
      try {
        await this.api.call((client) => client.decisions.answer(data.decisionId, { decision, ...detail }))
      } catch (error) {
        // Answered elsewhere first (another tab, the terminal, a colleague): the card shows that.
        const decided = error.problem?.decision
        if (decided && (error.code === 'decision_conflict' || error.code === 'decision_expired')) {
          entry.resolved(decided.status, decided.decidedBy, decided.scope, decided.reply?.kind)
          state.textContent += ' (answered elsewhere)'
          return
        }
        for (const button of controls()) button.disabled = false
        this.showError(error)
      }
    }
    const open = (kind) => {
      const area = h('textarea', {
        rows: kind === 'edit' ? 6 : 3,
        dataset: { reply: kind },
        'aria-label': kind === 'edit' ? 'Arguments to run with (JSON)' : 'Your answer for the model',
        placeholder: kind === 'edit' ? '' : 'What the model should read instead of the result',
      })
      // JSON escapes for the bidirectional controls: shown as \u202e, read back as the character.
      if (kind === 'edit') area.value = jsonWithEscapedControls(data.params)
      const send = () => {
        if (kind === 'respond') {
          if (area.value.trim()) void answer('respond', { text: area.value.trim() })
          return
        }
        let params
        try {
          params = JSON.parse(area.value)
        } catch {
          this.showError(new Error('The arguments are not valid JSON.'))
          return
        }
        void answer('edit', { params })
      }
      reply.replaceChildren(
        h('div.muted.small', kind === 'edit' ? 'Edit the arguments, then run it with them:' : 'Answer in its place:'),
        area,
        h(
          'div.row',
          h('button', { onclick: send, dataset: { send: kind } }, kind === 'edit' ? 'Run with these' : 'Send answer'),
          h('button.secondary', { onclick: () => reply.replaceChildren() }, 'Cancel'),
        ),
      )
      area.focus()
    }
    buttons.append(
      h('button', { onclick: () => answer('approve'), dataset: { answer: 'approve' } }, 'Approve once'),
      h(
        'button.secondary',
        { onclick: () => answer('approve_session'), dataset: { answer: 'approve_session' } },
        'Approve for this session',
      ),
      h('button.secondary', { onclick: () => open('edit'), dataset: { answer: 'edit' } }, 'Edit and approve'),
      h('button.secondary', { onclick: () => open('respond'), dataset: { answer: 'respond' } }, 'Respond instead'),
      h('button.danger', { onclick: () => answer('reject'), dataset: { answer: 'reject' } }, 'Reject'),
    )
    this.decisions.set(data.decisionId, entry)
    const call = data.callId ? this.calls.get(data.callId) : undefined
    if (call) call.extra.replaceChildren(card)
    else this.log.append(card)
  }

  clientForm(call, runId) {
    const output = h('textarea', { rows: 3, 'aria-label': 'Tool output (JSON)' }, '{"accepted": true, "output": ""}')
    const error = h('div.error')
    const submit = async (value) => {
      try {
        await this.api.call((client) => client.toolOutputs.submit(runId, [{ callId: call.callId, output: value }]))
        call.extra.replaceChildren(h('div.muted', 'Sent.'))
      } catch (caught) {
        error.textContent = caught.message
      }
    }
    call.extra.replaceChildren(
      h(
        'div.client-answer',
        h('div.muted.small', 'This tool runs on the client: answer with its output, or decline.'),
        output,
        h(
          'div.row',
          h(
            'button',
            {
              onclick: () => {
                try {
                  submit(JSON.parse(output.value))
                } catch {
                  error.textContent = 'That is not JSON.'
                }
              },
            },
            'Send output',
          ),
          h('button.danger', { onclick: () => submit({ accepted: false }) }, 'Decline'),
        ),
        error,
      ),
    )
  }

  scroll() {
    this.log.scrollTop = this.log.scrollHeight
  }
}

function riskTag(risk) {
  return h(`span.tag.risk-${risk}`, `risk: ${risk}`)
}

function parseArgs(text) {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

async function renderAudit(panel, api, conversationId, me) {
  const name = (id) => (id === me.id ? 'you' : id)
  const rows = h('tbody')
  const more = h('button.secondary.more', { hidden: true }, 'Load more')
  let cursor = null
  const load = async () => {
    const page = await api.get(`/api/audit${query({ conversationId, limit: 100, cursor })}`)
    rows.append(
      ...page.items.map((item) =>
        h(
          'tr',
          h('td', when(item.timings?.requestedAt)),
          h('td', item.commandId),
          h('td', item.entrance),
          h(
            'td',
            item.actor?.type === 'user'
              ? name(item.actor.id)
              : `${item.actor?.type ?? ''}${item.actor?.onBehalfOf ? ` for ${name(item.actor.onBehalfOf)}` : ''}`,
          ),
          h('td', item.risk ?? ''),
          h(
            'td',
            item.decision ? `${item.decision.outcome}${item.decision.by ? ` by ${name(item.decision.by)}` : ''}` : '',
          ),
          h('td', h(`span.tag.status-${item.status}`, item.status)),
        ),
      ),
    )
    cursor = page.nextCursor
    more.hidden = !cursor
    return page
  }
  more.onclick = () => load().catch(() => {})
  const first = await load()
  mount(
    panel,
    first.items.length === 0
      ? h('p.muted', 'Nothing was dispatched in this conversation yet.')
      : [
          h(
            'table.audit',
            h(
              'thead',
              h(
                'tr',
                ['when', 'command', 'entrance', 'actor', 'risk', 'decision', 'status'].map((name) => h('th', name)),
              ),
            ),
            rows,
          ),
          more,
        ],
  )
}
