// The Plinth console: a static page over the public HTTP API (no build step, no CDN).
import { Api, ApiError, query } from './api.js'
import { h, mount, when } from './dom.js'
import { renderConversation } from './conversation.js'
import { renderProject } from './project.js'

const main = document.getElementById('main')
const crumbs = document.getElementById('crumbs')
const who = document.getElementById('who')
const banner = document.getElementById('banner')

const state = { api: null, me: null, cleanup: null }

/** A message across the top: 'info' | 'warn' | 'error'; null hides it. */
export function notice(text, kind = 'info') {
  if (!text) {
    banner.hidden = true
    return
  }
  banner.hidden = false
  banner.className = `banner-${kind}`
  banner.textContent = text
}

function signOut(reason) {
  sessionStorage.removeItem('plinth.token')
  state.api = null
  state.me = null
  // Without a hashchange: its route() would draw the form again, without the reason.
  history.replaceState(null, '', '#/')
  renderSignIn(reason)
}

async function signIn(token) {
  const api = new Api(token, {
    onUnauthorized: () =>
      signOut('Your token is no longer accepted (revoked, expired or the user was disabled). Sign in again.'),
  })
  // The first check gets no automatic sign-out: a wrong token is reported once, on this form.
  const me = await api.request('GET', '/api/me', undefined, { token })
  sessionStorage.setItem('plinth.token', token)
  state.api = api
  state.me = me
  route()
}

function renderSignIn(message) {
  state.cleanup?.()
  state.cleanup = null
  crumbs.replaceChildren()
  who.replaceChildren()
  notice(null)
  const input = h('input', {
    type: 'password',
    name: 'token',
    autocomplete: 'off',
    placeholder: 'plt_…',
    required: true,
    'aria-label': 'API token',
  })
  const error = h('p.error', { role: 'alert' }, message ?? '')
  const button = h('button', { type: 'submit' }, 'Sign in')
  const form = h(
    'form.card.signin',
    {
      onsubmit: async (event) => {
        event.preventDefault()
        button.disabled = true
        error.textContent = ''
        try {
          await signIn(input.value.trim())
        } catch (caught) {
          error.textContent =
            caught instanceof ApiError && caught.status === 401
              ? 'That token was not accepted. Check it, or ask your operator for a new one (plinth users create / plinth tokens create).'
              : `Could not sign in: ${caught.message}`
        } finally {
          button.disabled = false
        }
      },
    },
    h('h1', 'Sign in'),
    h(
      'p.muted',
      'Paste an API token. It stays in this browser tab only (sessionStorage) and is sent as an Authorization header.',
    ),
    h('label', 'Token', input),
    button,
    error,
  )
  mount(main, form)
  input.focus()
}

function setCrumbs(...parts) {
  mount(
    crumbs,
    parts.flatMap((part, index) => [
      index > 0 ? h('span.sep', '›') : null,
      part.href ? h('a', { href: part.href }, part.label) : h('span', part.label),
    ]),
  )
}

async function renderProjects() {
  setCrumbs({ label: 'Projects' })
  const list = h('ul.items', { id: 'projects' })
  const more = h('button.secondary', { hidden: true }, 'More')
  let cursor = null
  const load = async () => {
    const page = await state.api.get(`/api/projects${query({ limit: 50, cursor })}`)
    for (const project of page.items) {
      const shared = project.ownerId !== state.me.id
      list.append(
        h(
          'li',
          h('a', { href: `#/projects/${project.id}` }, project.name),
          shared ? h('span.tag', 'shared') : null,
          project.description ? h('span.muted', ` — ${project.description}`) : null,
          h('span.muted.right', when(project.createdAt)),
        ),
      )
    }
    if (page.items.length === 0 && !cursor) list.append(h('li.muted', 'No projects yet: create one.'))
    cursor = page.nextCursor
    more.hidden = !cursor
  }
  more.onclick = () => load().catch(showError)
  const name = h('input', {
    name: 'name',
    placeholder: 'Project name',
    required: true,
    maxLength: 200,
    'aria-label': 'Project name',
  })
  const form = h(
    'form.inline',
    {
      onsubmit: async (event) => {
        event.preventDefault()
        try {
          const project = await state.api.post('/api/projects', { name: name.value.trim() })
          location.hash = `#/projects/${project.id}`
        } catch (error) {
          showError(error)
        }
      },
    },
    name,
    h('button', { type: 'submit' }, 'Create project'),
  )
  mount(main, h('section', h('h1', 'Projects'), form, list, more))
  await load()
}

async function renderAdmin() {
  setCrumbs({ label: 'Admin' })
  const stored = sessionStorage.getItem('plinth.adminToken') ?? ''
  const token = h('input', {
    type: 'password',
    name: 'adminToken',
    value: stored,
    placeholder: 'PLINTH_ADMIN_TOKEN',
    'aria-label': 'Admin token',
  })
  const out = h('div')
  const show = async () => {
    const adminToken = token.value.trim()
    sessionStorage.setItem('plinth.adminToken', adminToken)
    const settings = await state.api.request('GET', '/api/admin/settings', undefined, { token: adminToken })
    const select = h(
      'select',
      { name: 'execBackend', 'aria-label': 'Execution backend' },
      ['direct', 'sandbox'].map((name) => h('option', { value: name, selected: settings.execBackend === name }, name)),
    )
    const status = h('p.muted', { role: 'status' })
    mount(
      out,
      h('p', 'Execution backend: ', h('strong', { id: 'exec-backend' }, settings.execBackend)),
      settings.sandbox
        ? h(
            'p.muted',
            `Sandbox probe: ${settings.sandbox.ok ? `available (bwrap ${settings.sandbox.bwrapVersion ?? '?'}, cgroups ${settings.sandbox.cgroups})` : `unavailable — ${settings.sandbox.reason ?? ''}`}`,
          )
        : null,
      h(
        'form.inline',
        {
          onsubmit: async (event) => {
            event.preventDefault()
            try {
              const updated = await state.api.patch(
                '/api/admin/settings',
                { execBackend: select.value },
                { token: adminToken },
              )
              status.textContent = `Switched to ${updated.execBackend}.`
              document.getElementById('exec-backend').textContent = updated.execBackend
            } catch (error) {
              status.textContent = `Not switched: ${error.message}`
            }
          },
        },
        select,
        h('button', { type: 'submit' }, 'Apply'),
      ),
      status,
    )
  }
  const form = h(
    'form.inline',
    {
      onsubmit: (event) => {
        event.preventDefault()
        show().catch((error) =>
          mount(
            out,
            h(
              'p.error',
              error.status === 401 || error.status === 404 ? 'That admin token was not accepted.' : error.message,
            ),
          ),
        )
      },
    },
    token,
    h('button', { type: 'submit' }, 'Open settings'),
  )
  mount(
    main,
    h(
      'section',
      h('h1', 'Operator settings'),
      h('p.muted', 'Needs the server’s admin token (PLINTH_ADMIN_TOKEN).'),
      form,
      out,
    ),
  )
  if (stored) form.requestSubmit()
}

export function showError(error) {
  if (error instanceof ApiError && error.status === 401) return // signed out already
  notice(error instanceof ApiError ? `${error.message} (${error.code})` : String(error?.message ?? error), 'error')
}

async function route() {
  state.cleanup?.()
  state.cleanup = null
  notice(null)
  if (!state.api) return renderSignIn()
  mount(
    who,
    h('span', state.me.name ?? state.me.id),
    ' ',
    h('a', { href: '#/admin' }, 'admin'),
    ' ',
    h('button.link', { onclick: () => signOut() }, 'sign out'),
  )
  const path = location.hash.replace(/^#/, '') || '/'
  const [, kind, id] = path.split('/')
  const context = {
    api: state.api,
    me: state.me,
    setCrumbs,
    notice,
    showError,
    onCleanup: (fn) => (state.cleanup = fn),
  }
  try {
    // An id of another shape in the address is as absent as an unknown one (the API would say 400).
    if ((kind === 'projects' || kind === 'conversations') && id && !/^[0-9A-HJKMNP-TV-Z]{26}$/.test(id))
      throw new ApiError(404, 'not_found', 'not found')
    if (kind === 'projects' && id) await renderProject(main, id, context)
    else if (kind === 'conversations' && id) await renderConversation(main, id, context)
    else if (kind === 'admin') await renderAdmin()
    else await renderProjects()
  } catch (error) {
    if (error instanceof ApiError && error.status === 404)
      mount(main, h('p.error', 'Not found (or not yours).'), h('a', { href: '#/' }, 'Back to projects'))
    else showError(error)
  }
}

window.addEventListener('hashchange', () => void route())

const saved = sessionStorage.getItem('plinth.token')
if (saved) signIn(saved).catch(() => signOut('Your saved token is no longer accepted. Sign in again.'))
else renderSignIn()
