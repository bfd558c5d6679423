// A project: its conversations, and its knowledge (upload, list, search).
import { query } from './api.js'
import { h, mount, when } from './dom.js'

export async function renderProject(main, projectId, { api, me, setCrumbs, showError }) {
  const project = await api.get(`/api/projects/${projectId}`)
  setCrumbs({ label: 'Projects', href: '#/' }, { label: project.name })
  const shared = project.ownerId !== me.id
  const conversations = h('section', h('h2', 'Conversations'))
  const knowledge = h('section', h('h2', 'Knowledge'))
  mount(
    main,
    h('h1', project.name, shared ? h('span.tag', 'shared with you') : null),
    project.description ? h('p.muted', project.description) : null,
    h('div.columns', conversations, knowledge),
  )
  await Promise.all([
    renderConversations(conversations, project, api, showError),
    renderKnowledge(knowledge, project, api, showError),
  ])
}

async function renderConversations(section, project, api, showError) {
  const list = h('ul.items', { id: 'conversations' })
  const title = h('input', {
    name: 'title',
    placeholder: 'Title (optional)',
    maxLength: 200,
    'aria-label': 'Conversation title',
  })
  const form = h(
    'form.inline',
    {
      onsubmit: async (event) => {
        event.preventDefault()
        try {
          const conversation = await api.post(
            `/api/projects/${project.id}/conversations`,
            title.value.trim() ? { title: title.value.trim() } : {},
          )
          location.hash = `#/conversations/${conversation.id}`
        } catch (error) {
          showError(error)
        }
      },
    },
    title,
    h('button', { type: 'submit' }, 'New conversation'),
  )
  const more = h('button.secondary.more', { hidden: true }, 'Load more')
  section.append(form, list, more)
  let cursor = null
  const load = async () => {
    const page = await api.get(`/api/projects/${project.id}/conversations${query({ limit: 100, cursor })}`)
    for (const conversation of page.items) {
      list.append(
        h(
          'li',
          h('a', { href: `#/conversations/${conversation.id}` }, conversation.title || 'Untitled conversation'),
          h('span.muted.right', when(conversation.createdAt)),
        ),
      )
    }
    if (page.items.length === 0 && !cursor) list.append(h('li.muted', 'No conversations yet.'))
    cursor = page.nextCursor
    more.hidden = !cursor
  }
  more.onclick = () => load().catch(showError)
  await load()
}

async function renderKnowledge(section, project, api, showError) {
  const list = h('ul.items', { id: 'knowledge' })
  const more = h('button.secondary.more', { hidden: true }, 'Load more')
  let cursor = null
  let shown = 0
  let poll = null
  const itemView = (item) =>
    h(
      'li',
      { dataset: { knowledgeId: item.id } },
      h('strong', item.title),
      item.shared ? h('span.tag', 'shared') : null,
      h('span.tag', item.status),
      // Ingestion: pending while it is read and indexed, then ready, or failed with the reason.
      h(
        `span.tag.ingest.ingest-${item.ingestStatus}${item.ingestStatus === 'ready' ? '' : '.warn'}`,
        item.ingestStatus,
      ),
      item.ingestStatus === 'ready'
        ? h('span.muted', ` ${item.chunkCount} ${item.chunkCount === 1 ? 'chunk' : 'chunks'}`)
        : null,
      item.ingestStatus === 'failed'
        ? h('div.error.ingest-error', `Failed: ${item.ingestError ?? 'unknown reason'}`)
        : null,
      item.status === 'draft' && !item.shared
        ? h(
            'button.link',
            { onclick: () => api.post(`/api/knowledge/${item.id}/publish`).then(refresh).catch(showError) },
            'publish',
          )
        : null,
    )
  const fetchPage = (after) => api.get(`/api/projects/${project.id}/knowledge${query({ limit: 100, cursor: after })}`)
  const schedule = (items) => {
    // Items still ingesting: look again shortly.
    clearTimeout(poll)
    if (items.some((item) => item.ingestStatus === 'pending') && list.isConnected)
      poll = setTimeout(() => refresh().catch(() => {}), 1500)
  }
  // Reloads as many items as are shown (at least the first page), so "load more" is not undone.
  const refresh = async () => {
    const items = []
    let next = null
    do {
      const page = await fetchPage(next)
      items.push(...page.items)
      next = page.nextCursor
    } while (next && items.length < shown)
    cursor = next
    shown = items.length
    mount(list, items.map(itemView))
    if (items.length === 0) list.append(h('li.muted', 'No knowledge yet.'))
    more.hidden = !cursor
    schedule(items)
  }
  more.onclick = async () => {
    try {
      const page = await fetchPage(cursor)
      list.append(...page.items.map(itemView))
      shown += page.items.length
      cursor = page.nextCursor
      more.hidden = !cursor
    } catch (error) {
      showError(error)
    }
  }
  const status = h('p.muted', { role: 'status' })
  const file = h('input', {
    type: 'file',
    name: 'file',
    accept: '.txt,.md,.html,.pdf,.docx',
    'aria-label': 'Knowledge file',
  })
  const title = h('input', { name: 'title', placeholder: 'Title', maxLength: 500, 'aria-label': 'Knowledge title' })
  const text = h('textarea', {
    name: 'text',
    rows: 3,
    placeholder: 'Or paste text here',
    'aria-label': 'Knowledge text',
  })
  const upload = h(
    'form.stack',
    {
      onsubmit: async (event) => {
        event.preventDefault()
        status.textContent = 'Uploading…'
        try {
          if (file.files?.length) {
            const titled = title.value.trim() ? { title: title.value.trim() } : {}
            await api.call((client) => client.knowledge.upload(project.id, { file: file.files[0], ...titled }))
          } else {
            await api.call((client) =>
              client.knowledge.upload(project.id, { title: title.value.trim() || 'Untitled', text: text.value }),
            )
          }
          status.textContent = 'Added.'
          upload.reset()
          await refresh()
        } catch (error) {
          status.textContent = `Not added: ${error.message}`
        }
      },
    },
    title,
    file,
    text,
    h('button', { type: 'submit' }, 'Add knowledge'),
    status,
  )
  const results = h('ol.hits', { id: 'search-results' })
  const q = h('input', {
    type: 'search',
    name: 'q',
    placeholder: 'Search this project',
    required: true,
    'aria-label': 'Search',
  })
  const search = h(
    'form.inline',
    {
      onsubmit: async (event) => {
        event.preventDefault()
        try {
          const answer = await api.call((client) => client.search({ projectId: project.id, q: q.value, k: 10 }))
          mount(
            results,
            answer.items.map((hit) =>
              h(
                'li',
                h('strong', hit.title),
                hit.heading ? h('span.muted', ` · ${hit.heading}`) : null,
                hit.shared ? h('span.tag', 'shared') : null,
                h('div.snippet', hit.snippet || hit.text),
              ),
            ),
          )
          if (answer.items.length === 0) results.append(h('li.muted', 'Nothing found.'))
        } catch (error) {
          showError(error)
        }
      },
    },
    q,
    h('button', { type: 'submit' }, 'Search'),
  )
  section.append(upload, list, more, h('h3', 'Search'), search, results)
  await refresh()
}
