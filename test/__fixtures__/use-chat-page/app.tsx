import { useChat } from '@ai-sdk/react'
import { DefaultChatTransport, getToolName, isTextUIPart, isToolUIPart, lastAssistantMessageIsCompleteWithApprovalResponses, type UIMessage } from 'ai'
import { useState, type FormEvent, type ReactNode } from 'react'
import { createRoot } from 'react-dom/client'

// A page built on useChat, wired as docs/ui-stream.md shows, that test/ui-stream-browser.test.ts
// drives in Chromium. Its address: ?conversation=<id>&api=<Plinth's origin>[&model=<id>]#token=<token>.
// The token moves from the hash to sessionStorage, so a reload keeps it without keeping it in the address.
const params = new URLSearchParams(location.search)
const conversationId = params.get('conversation') ?? ''
const plinth = params.get('api') ?? ''
const model = params.get('model')
const fromHash = new URLSearchParams(location.hash.slice(1)).get('token')
if (fromHash) {
  sessionStorage.setItem('plinth-token', fromHash)
  history.replaceState(null, '', location.pathname + location.search)
}
const token = sessionStorage.getItem('plinth-token') ?? ''

const transport = new DefaultChatTransport<UIMessage>({
  api: `${plinth}/api/conversations/${conversationId}/ui-stream`,
  headers: { authorization: `Bearer ${token}` },
  // Extra request fields (docs/ui-stream.md): here the model to run (the reload case's gated model).
  body: model ? { model } : {},
  // Plinth keeps the history: sending only the last message keeps requests small. Keep `body`:
  // what this returns replaces the whole request body, extra fields (below) included.
  prepareSendMessagesRequest: ({ id, messages, body }) => ({ body: { ...body, id, messages: messages.slice(-1) } }),
  prepareReconnectToStreamRequest: ({ id }) => ({ api: `${plinth}/api/conversations/${id}/ui-stream` }),
})

type Part = UIMessage['parts'][number]

function PartView({ part, answer }: { part: Part; answer: (approvalId: string, approved: boolean) => void }): ReactNode {
  if (isTextUIPart(part)) return <p data-testid="text">{part.text}</p>
  if (!isToolUIPart(part)) return null
  const name = getToolName(part)
  return (
    <div className="tool" data-testid="tool" data-tool-name={name} data-state={part.state}>
      <code>{name}</code>
      <span className="state">{part.state}</span>
      {part.input !== undefined && <pre data-testid="tool-input">{JSON.stringify(part.input)}</pre>}
      {part.state === 'output-available' && <pre data-testid="tool-output">{JSON.stringify(part.output)}</pre>}
      {part.state === 'output-error' && <pre data-testid="tool-error">{part.errorText}</pre>}
      {part.state === 'approval-requested' && (
        <div className="answer">
          <button data-testid="approve" onClick={() => answer(part.approval.id, true)}>
            Approve
          </button>
          <button data-testid="reject" onClick={() => answer(part.approval.id, false)}>
            Reject
          </button>
        </div>
      )}
    </div>
  )
}

function Chat(): ReactNode {
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    id: conversationId, // the chat id IS the conversation id
    resume: true, // after a reload, GET the active run's message again
    transport,
    // Answering an approval sends the request that lets the run go on.
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  })
  const [input, setInput] = useState('')
  const submit = (event: FormEvent): void => {
    event.preventDefault()
    if (!input.trim()) return
    void sendMessage({ text: input })
    setInput('')
  }
  const answer = (id: string, approved: boolean): void => void addToolApprovalResponse({ id, approved, ...(!approved && { reason: 'rejected in the page' }) })
  return (
    <main data-testid="chat" data-status={status}>
      <h1>useChat on Plinth</h1>
      <ol data-testid="messages">
        {messages.map((message) => (
          <li key={message.id} className={message.role} data-testid={`message-${message.role}`} data-message-id={message.id}>
            <div className="role">{message.role}</div>
            {message.parts.map((part, index) => (
              <PartView key={index} part={part} answer={answer} />
            ))}
          </li>
        ))}
      </ol>
      {error && (
        <p role="alert" data-testid="error">
          {error.message}
        </p>
      )}
      <form onSubmit={submit}>
        <input data-testid="input" value={input} placeholder="Ask something" onChange={(event) => setInput(event.target.value)} />
        <button data-testid="send" type="submit" disabled={status === 'submitted' || status === 'streaming'}>
          Send
        </button>
      </form>
    </main>
  )
}

createRoot(document.getElementById('root')!).render(<Chat />)
