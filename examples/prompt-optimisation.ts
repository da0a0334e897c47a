/**
 * A minimal prompt-optimisation loop on the library API: each round runs a job with the agent's current prompt plus
 * one candidate edit, reads the rewards as trials finish, and keeps the edit when the mean reward went up.
 *
 * The "model" here is a scripted stand-in (no LLM vendor API is reachable from this machine): it runs every prompt
 * line that starts with "$ " as a shell command. Swap the agent for one that calls a real model and the loop is
 * the same.
 *
 *   node dist/examples/prompt-optimisation.js [--tasks examples/tasks] [--jobs-dir jobs]
 */
import path from 'node:path';
import { parseArgs } from 'node:util';

import { Rollout } from 'rollout-agents';
import type { TrialResult } from 'rollout-agents';

const SCRIPTED_MODEL = `#!/bin/bash
# Stand-in for a model that follows its prompt: runs the prompt's "$ " lines, in order.
printf '%s\\n' "$PROMPT" | sed -n 's/^\\$ //p' > /tmp/plan.sh
bash /tmp/plan.sh
`;

/** Edits the optimiser may make to the prompt, tried one per round (a real loop would ask a model for them). */
const CANDIDATE_EDITS = [
  "$ echo 'Hello world' > hello.txt",
  "$ echo 'Hello, world!' > hello.txt",
  '$ wc -w < /app/poem.txt > /app/count.txt',
  '$ wc -l < /app/poem.txt > /app/lines.txt',
];

/** A trial's score: the mean of its reward keys (0 when it has none). */
function score(result: TrialResult): number {
  const values = Object.values(result.rewards ?? {});
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}

export async function optimisePrompt(options: { tasks: string; jobsDir: string; run: string }) {
  const rollout = await Rollout.connect({ worker: { environmentTypes: ['docker'], maxTrials: 2 } });
  const rounds: { round: number; edit: string | null; mean: number; kept: boolean }[] = [];
  try {
    let prompt = 'Solve the task in the working directory.';
    let best = -1;
    for (const [round, edit] of [null, ...CANDIDATE_EDITS].entries()) {
      const candidate = edit ? `${prompt}\n${edit}` : prompt;
      const job = await rollout.submitJob({
        name: `${options.run}-round-${round}`,
        jobs_dir: options.jobsDir,
        n_concurrent_trials: 2,
        // Every round runs the same tasks: keep their images between rounds.
        environment: { type: 'docker', delete: false },
        agents: [{ name: 'prompted', execute: SCRIPTED_MODEL, env: { PROMPT: candidate } }],
        datasets: [{ path: options.tasks }],
      });
      const scores: number[] = [];
      for await (const result of job.results()) {
        scores.push(score(result));
        console.log(`  round ${round}: ${result.task_name} → ${JSON.stringify(result.rewards)}`);
      }
      const mean = scores.reduce((a, b) => a + b, 0) / Math.max(scores.length, 1);
      const kept = mean > best;
      if (kept) {
        best = mean;
        prompt = candidate;
      }
      rounds.push({ round, edit, mean, kept });
      console.log(
        `round ${round}: edit ${JSON.stringify(edit)} → mean reward ${mean.toFixed(3)} (${kept ? 'kept' : 'dropped'})`
      );
    }
    console.log(`best mean reward ${best.toFixed(3)} with prompt:\n${prompt}`);
    return { prompt, best, rounds };
  } finally {
    await rollout.close();
  }
}

if (require.main === module) {
  const { values } = parseArgs({
    options: {
      tasks: { type: 'string', default: path.join(__dirname, '..', '..', 'examples', 'tasks') },
      'jobs-dir': { type: 'string', default: 'jobs' },
      run: { type: 'string', default: `prompt-opt-${Date.now().toString(36)}` },
    },
  });
  optimisePrompt({ tasks: values.tasks, jobsDir: values['jobs-dir'], run: values.run }).catch((err: unknown) => {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
}
