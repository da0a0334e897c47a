/**
 * What the agent did, when the trial recorded it: `agent/trajectory.json` (Harbor's ATIF: steps with messages, tool
 * calls, observations and per-step token metrics) and `agent/llm-calls.jsonl` (one model call per line: timestamps,
 * dialect, model, request, response, status, latency, usage). Either is optional; unknown fields are ignored.
 */

import { readRegularHead } from '../files/no-follow';
import type { VNode } from './html';
import { fmt, html } from './html';
import { trialLayout } from '../contracts/paths';

interface AtifToolCall {
  tool_call_id?: string;
  function_name?: string;
  arguments?: unknown;
}
interface AtifStep {
  step_id?: number;
  timestamp?: string;
  source?: string;
  model_name?: string;
  message?: unknown;
  reasoning_content?: string;
  tool_calls?: AtifToolCall[];
  observation?: { results?: { source_call_id?: string; content?: unknown }[] };
  metrics?: { prompt_tokens?: number; completion_tokens?: number; cached_tokens?: number; cost_usd?: number };
}
export interface AtifTrajectory {
  schema_version?: string;
  agent?: { name?: string; version?: string; model_name?: string };
  steps?: AtifStep[];
  final_metrics?: {
    total_prompt_tokens?: number;
    total_completion_tokens?: number;
    total_cached_tokens?: number;
    total_cost_usd?: number;
  };
}

export interface LlmCall {
  timestamps?: Record<string, string>;
  started_at?: string;
  finished_at?: string;
  dialect?: string;
  model?: string;
  request?: unknown;
  response?: unknown;
  status?: number | string;
  latency_ms?: number;
  latency?: number;
  usage?: { input_tokens?: number; output_tokens?: number; cached_tokens?: number; cost_usd?: number };
}

export interface Trajectory {
  atif?: AtifTrajectory;
  calls?: LlmCall[];
  /** The files were larger than the viewer reads; only their start is shown. */
  truncated: boolean;
}

/** Past this, a trajectory file is shown in part (the file itself stays downloadable). */
const MAX_READ_BYTES = 8 * 2 ** 20;
const MAX_STEPS = 500;
const MAX_TEXT = 4000;

export async function readTrajectory(trialDir: string): Promise<Trajectory | undefined> {
  const atifFile = await readCapped(trialLayout(trialDir).trajectory);
  const callsFile = await readCapped(trialLayout(trialDir).llmCalls);
  if (!atifFile && !callsFile) return undefined;
  const trajectory: Trajectory = { truncated: Boolean(atifFile?.truncated || callsFile?.truncated) };
  if (atifFile && !atifFile.truncated) {
    try {
      trajectory.atif = JSON.parse(atifFile.text) as AtifTrajectory;
    } catch {
      // A torn or invalid trajectory is still listed with the trial's files; nothing to draw from it.
    }
  }
  if (callsFile) {
    trajectory.calls = callsFile.text.split('\n').flatMap((line) => {
      if (!line.trim()) return [];
      try {
        return [JSON.parse(line) as LlmCall];
      } catch {
        return [];
      }
    });
  }
  return trajectory.atif || trajectory.calls?.length ? trajectory : undefined;
}

async function readCapped(file: string): Promise<{ text: string; truncated: boolean } | undefined> {
  const head = await readRegularHead(file, MAX_READ_BYTES);
  return head && { text: head.text, truncated: head.size > MAX_READ_BYTES };
}

function text(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    // ATIF content parts: text parts as text, images by their path.
    return value
      .map((part: { type?: string; text?: string; source?: { path?: string } }) =>
        part?.type === 'text'
          ? (part.text ?? '')
          : part?.type === 'image'
            ? `[image ${part.source?.path ?? ''}]`
            : JSON.stringify(part)
      )
      .join('\n');
  }
  return JSON.stringify(value, null, 2);
}

function clip(value: string): string {
  return value.length > MAX_TEXT
    ? `${value.slice(0, MAX_TEXT)}\n… (${value.length - MAX_TEXT} more characters)`
    : value;
}

export function TrajectoryView({ trajectory }: { trajectory: Trajectory }): VNode {
  return html`<div id="trajectory">
    ${trajectory.atif ? atifView(trajectory.atif) : null}
    ${trajectory.calls?.length ? callsView(trajectory.calls) : null}
    ${trajectory.truncated ? html`<p class="muted">Trajectory files are large: only their start is read.</p>` : null}
  </div>`;
}

function atifView(atif: AtifTrajectory): VNode {
  const steps = atif.steps ?? [];
  const total = atif.final_metrics;
  return html`<div class="atif">
    <h2>
      Trajectory${' '}
      <span class="muted"
        >${atif.agent?.name ?? ''} ${atif.agent?.version ?? ''} ${atif.agent?.model_name ?? ''} · ${steps.length} steps
        ${
          total
            ? ` · ${total.total_prompt_tokens ?? '–'} prompt / ${total.total_completion_tokens ?? '–'} completion tokens` +
              (total.total_cost_usd !== undefined ? ` · $${fmt(total.total_cost_usd, 4)}` : '')
            : ''
        }</span
      >
    </h2>
    <ol class="steps">
      ${steps.slice(0, MAX_STEPS).map((step) => {
        const results = new Map((step.observation?.results ?? []).map((r) => [r.source_call_id, r.content]));
        return html`<li class=${`step ${step.source ?? ''}`}>
          <div class="step-head">
            <b>${step.source ?? 'step'}</b>${' '}
            <span class="muted">#${step.step_id ?? ''} ${step.timestamp ?? ''} ${step.model_name ?? ''}</span>
            ${step.metrics ? html`<span class="tokens">${stepTokens(step.metrics)}</span>` : null}
          </div>
          ${
            step.reasoning_content
              ? html`<details>
                  <summary>reasoning</summary>
                  <pre>${clip(step.reasoning_content)}</pre>
                </details>`
              : null
          }
          ${text(step.message) ? html`<pre class="message">${clip(text(step.message))}</pre>` : null}
          ${(step.tool_calls ?? []).map(
            (call) =>
              html`<div class="tool-call">
                <code>${call.function_name ?? 'tool'}(${clip(text(call.arguments))})</code>
                ${
                  results.has(call.tool_call_id)
                    ? html`<pre class="observation">${clip(text(results.get(call.tool_call_id)))}</pre>`
                    : null
                }
              </div>`
          )}
        </li>`;
      })}
    </ol>
    ${steps.length > MAX_STEPS ? html`<p class="muted">${steps.length - MAX_STEPS} more steps not shown.</p>` : null}
  </div>`;
}

function stepTokens(metrics: NonNullable<AtifStep['metrics']>): string {
  const cost = metrics.cost_usd !== undefined ? ` · $${fmt(metrics.cost_usd, 4)}` : '';
  return `${metrics.prompt_tokens ?? '–'} in (${metrics.cached_tokens ?? 0} cached) · ${metrics.completion_tokens ?? '–'} out${cost}`;
}

function callsView(calls: LlmCall[]): VNode {
  return html`<div class="llm-calls">
    <h2>Model calls <span class="muted">${calls.length}</span></h2>
    <table class="sortable" id="llm-calls">
      <thead>
        <tr>
          <th data-sort-method="number">#</th>
          <th>started</th>
          <th>dialect</th>
          <th>model</th>
          <th>status</th>
          <th data-sort-method="number">latency (ms)</th>
          <th data-sort-method="number">input</th>
          <th data-sort-method="number">cached</th>
          <th data-sort-method="number">output</th>
          <th data-sort-method="none">request · response</th>
        </tr>
      </thead>
      <tbody>
        ${calls.slice(0, MAX_STEPS).map(
          (call, i) =>
            html`<tr>
              <td>${i + 1}</td>
              <td>${call.timestamps?.started_at ?? call.timestamps?.start ?? call.started_at ?? ''}</td>
              <td>${call.dialect ?? ''}</td>
              <td>${call.model ?? ''}</td>
              <td>${call.status ?? ''}</td>
              <td class="num">${fmt(call.latency_ms ?? call.latency, 0)}</td>
              <td class="num">${call.usage?.input_tokens ?? '–'}</td>
              <td class="num">${call.usage?.cached_tokens ?? '–'}</td>
              <td class="num">${call.usage?.output_tokens ?? '–'}</td>
              <td>
                <details>
                  <summary>show</summary>
                  <pre>${clip(text(call.request))}</pre>
                  <pre class="observation">${clip(text(call.response))}</pre>
                </details>
              </td>
            </tr>`
        )}
      </tbody>
    </table>
  </div>`;
}
