/** The tools a session offers its client, as OpenAI function definitions (in POST /sessions and the trajectory). */
import type { ToolDefinition } from '../gateway/dialect';
import type { SessionLimits } from '../contracts/session';

export function sessionTools(limits: Pick<SessionLimits, 'stepTimeoutSec' | 'outputLimitBytes'>): ToolDefinition[] {
  return [
    {
      type: 'function',
      function: {
        name: 'bash',
        description:
          `Run a bash command in the task's container, in its working directory. At most ` +
          `${limits.stepTimeoutSec} s per command; output (stdout and stderr) cut at ` +
          `${limits.outputLimitBytes} bytes.`,
        parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
      },
    },
    {
      type: 'function',
      function: {
        name: 'submit',
        description: 'Run the task verifier on the container as it is now, return its reward and end the session.',
        parameters: { type: 'object', properties: {} },
      },
    },
  ];
}
