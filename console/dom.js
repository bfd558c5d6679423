// A tiny element builder: h('div.card', {onclick}, 'text', child). Text is always set as text, never HTML.
export function h(tag, props, ...children) {
  const [name, ...classes] = tag.split('.')
  const el = document.createElement(name || 'div')
  if (classes.length > 0) el.className = classes.join(' ')
  if (props && (typeof props !== 'object' || props instanceof Node || Array.isArray(props))) {
    children.unshift(props)
    props = null
  }
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value)
    else if (key === 'dataset') Object.assign(el.dataset, value)
    else if (key in el && key !== 'list' && key !== 'form') el[key] = value
    else el.setAttribute(key, value === true ? '' : String(value))
  }
  append(el, children)
  return el
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue
    if (Array.isArray(child)) append(el, child)
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)))
  }
}

/** Replaces an element's children. */
export function mount(el, ...children) {
  el.replaceChildren()
  append(el, children)
  return el
}

export function when(date) {
  if (!date) return ''
  return new Date(date).toLocaleString()
}

// Bidirectional marks, overrides and isolates reorder what follows them: a command shown with U+202E
// can read as something else than what runs. Arguments, previews and results show them by name.
const bidiControls = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g

/** Text with its bidirectional controls shown as `<U+202E>`, so it reads in the order it runs. */
export function literal(text) {
  return text.replace(bidiControls, (char) => `<U+${char.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}>`)
}

/** JSON to edit: the bidirectional controls written as `\u202e` escapes, which JSON.parse reads back. */
export function jsonWithEscapedControls(value) {
  return JSON.stringify(value, null, 2).replace(
    bidiControls,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`,
  )
}

/** JSON for display, shortened past `max` characters. */
export function pretty(value, max = 4000) {
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2)
  if (text === undefined) return ''
  return literal(text.length > max ? `${text.slice(0, max)}\n… (${text.length - max} more characters)` : text)
}
