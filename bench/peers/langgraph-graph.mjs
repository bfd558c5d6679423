// The bench's round as a LangGraph.js ReAct agent: the model (the bench's fake OpenAI upstream) calls
// get_weather, the tool answers, the model answers.
import { tool } from '@langchain/core/tools'
import { createReactAgent } from '@langchain/langgraph/prebuilt'
import { ChatOpenAI } from '@langchain/openai'
import { z } from 'zod'

const getWeather = tool(async ({ city }) => JSON.stringify({ city, tempC: 21, sky: 'clear' }), {
  name: 'get_weather',
  description: 'The current weather in a city.',
  schema: z.object({ city: z.string().min(1).max(100) }),
})

const llm = new ChatOpenAI({
  model: 'm',
  apiKey: 'bench',
  configuration: { baseURL: process.env.UPSTREAM_URL },
  streaming: true,
  streamUsage: true,
})

export const graph = createReactAgent({ llm, tools: [getWeather], prompt: 'You are an agent. Answer concisely.' })
