// Assistant answers as Markdown: `marked` turns them into HTML, DOMPurify keeps only safe HTML
// (no scripts, no event handlers, no javascript: links) before it reaches the page.
import { marked } from '/console/vendor/marked.js'
import DOMPurify from '/console/vendor/purify.js'

// Links open in a new tab and tell the other site nothing about this page.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank')
    node.setAttribute('rel', 'noopener noreferrer')
  }
})

const purifyOptions = {
  USE_PROFILES: { html: true },
  // Inline styles and forms are refused by the page's policy or have no business in an answer.
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select'],
  FORBID_ATTR: ['style'],
}

/** Markdown text as a sanitized DOM fragment. */
export function renderMarkdown(text) {
  const html = marked.parse(text ?? '', { gfm: true, breaks: false, async: false })
  return DOMPurify.sanitize(html, { ...purifyOptions, RETURN_DOM_FRAGMENT: true })
}
