// Drives a running `cmf serve` with the official openai package and prints what it got as one JSON object;
// OpenAiNodeClientTest checks it against the engine. Usage: CMF_BASE_URL=http://127.0.0.1:PORT/v1 CMF_API_KEY=K node openai-client.mjs
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.CMF_BASE_URL, apiKey: process.env.CMF_API_KEY, maxRetries: 0 });
const messages = [{ role: 'user', content: 'What does grep do?' }];
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const chat = await client.chat.completions.create({ model: 'default', messages, temperature: 0, max_tokens: 12 });
out.chat = { content: chat.choices[0].message.content, finish: chat.choices[0].finish_reason, usage: chat.usage };

const stream = await client.chat.completions.create({
  model: 'default', messages, temperature: 0, max_tokens: 12, stream: true, stream_options: { include_usage: true },
});
let text = '';
let usage = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  for (const c of chunk.choices) text += c.delta?.content ?? '';
  if (chunk.usage) usage = chunk.usage;
}
out.stream = { content: text, chunks, usage };

const lp = await client.chat.completions.create({
  model: 'default', messages, temperature: 0, max_tokens: 4, logprobs: true, top_logprobs: 3,
});
out.logprobs = lp.choices[0].logprobs.content.map((t) => ({ token: t.token, logprob: t.logprob, top: t.top_logprobs.length }));

const n = await client.chat.completions.create({ model: 'default', messages, max_tokens: 5, n: 3, seed: 5, temperature: 1 });
out.n = n.choices.map((c) => c.index);

const completion = await client.completions.create({ model: 'default', prompt: 'The ls command', max_tokens: 6, temperature: 0 });
out.completion = completion.choices[0].text;

const structured = await client.chat.completions.create({
  model: 'default', messages, max_tokens: 40, temperature: 0.9, seed: 2,
  response_format: {
    type: 'json_schema',
    json_schema: {
      name: 'answer', strict: true,
      schema: { type: 'object', properties: { command: { type: 'string' }, safe: { type: 'boolean' } }, required: ['command', 'safe'] },
    },
  },
});
out.jsonSchema = JSON.parse(structured.choices[0].message.content);

const tools = [{
  type: 'function',
  function: {
    name: 'get_manual', description: "Shows a command's manual page",
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
}];
const toolChoice = { type: 'function', function: { name: 'get_manual' } };
const called = await client.chat.completions.create({
  model: 'default', messages, tools, tool_choice: toolChoice, max_tokens: 100, temperature: 0.7, seed: 1,
});
const call = called.choices[0].message.tool_calls[0];
out.toolCall = { finish: called.choices[0].finish_reason, name: call.function.name, arguments: JSON.parse(call.function.arguments) };

const streamedCall = await client.chat.completions.create({
  model: 'default', messages, tools, tool_choice: toolChoice, max_tokens: 100, temperature: 0.7, seed: 2, stream: true,
});
const parts = {};
let streamedFinish = null;
for await (const chunk of streamedCall) {
  for (const c of chunk.choices) {
    for (const tc of c.delta?.tool_calls ?? []) {
      parts[tc.index] ??= { name: '', arguments: '' };
      parts[tc.index].name += tc.function?.name ?? '';
      parts[tc.index].arguments += tc.function?.arguments ?? '';
    }
    if (c.finish_reason) streamedFinish = c.finish_reason;
  }
}
out.streamedToolCall = { finish: streamedFinish, name: parts[0]?.name, arguments: JSON.parse(parts[0]?.arguments ?? 'null') };

try {
  await client.chat.completions.create({ model: 'default', messages, n: 0 });
  out.badRequest = 'accepted';
} catch (e) {
  out.badRequest = { status: e.status, type: e.type, param: e.param, isBadRequest: e instanceof OpenAI.BadRequestError };
}

console.log(JSON.stringify(out));
