/** A trial's page: facts, rewards and error, the lifecycle timeline, instruction, trajectory, logs and files. */
import { STEPS } from '../../contracts/trial';
import type { StepTiming, TaskStepResult } from '../../contracts/trial';
import type { StepSpan } from '../charts/trial';
import { trialCharts } from '../charts/trial';
import type { TrialRow } from '../data';
import { errorLevel } from '../data';
import type { LinkContext, VNode } from '../html';
import { bytes, document, fmt, html, rewardColour } from '../html';
import type { LlmCall, Trajectory } from '../trajectory';
import { TrajectoryView } from '../trajectory';

export interface ShownFile {
  path: string;
  size: number;
  /** The first bytes, when the file is text. */
  head: string | undefined;
  truncated: boolean;
  /** Past the page's bounds: listed, its head not shown. */
  notShown: boolean;
}

export interface TrialPageData {
  jobName: string;
  row: TrialRow;
  instruction: string | undefined;
  files: ShownFile[];
  /** Files past the page's bounds, not listed. */
  moreFiles: number;
  trajectory: Trajectory | undefined;
}

export function trialPage(ctx: LinkContext, data: TrialPageData): string {
  const { row, jobName } = data;
  const result = row.result;
  const uiLink =
    ctx.temporalUiUrl && result
      ? `${ctx.temporalUiUrl}/namespaces/${encodeURIComponent(ctx.temporalNamespace)}/workflows/${encodeURIComponent(result.workflow_id)}`
      : null;
  return document(
    row.trialName,
    ctx,
    html`<section>
      <nav class="crumbs">
        <a href=${ctx.href([])}>jobs</a> / <a href=${ctx.href(['jobs', jobName])}>${jobName}</a> / ${row.trialName}
      </nav>
      <h1>${row.trialName} <span class=${`status ${row.state}`}>${row.state}</span></h1>
      ${factsTable(row, uiLink)}
      ${result ? timeline(result, data.trajectory?.calls ?? []) : html`<p>This trial has not finished.</p>`}
      ${
        data.instruction !== undefined
          ? html`<details open>
              <summary><h2>Instruction</h2></summary>
              <pre class="file">${data.instruction}</pre>
            </details>`
          : null
      }
      ${data.trajectory ? html`<${TrajectoryView} trajectory=${data.trajectory} />` : null}
      <h2>Logs and files</h2>
      ${filesSection(ctx, data)}
    </section>`
  );
}

function factsTable(row: TrialRow, uiLink: string | null): VNode {
  const result = row.result;
  return html`<table class="facts" id="facts">
    <tbody>
      <tr>
        <th>task</th>
        <td>${row.taskName} <span class="muted">(${row.datasetName})</span></td>
      </tr>
      <tr>
        <th>agent</th>
        <td>
          ${row.agentName}${' '}
          ${
            row.agentInfo
              ? html`<span class="muted"
                  >${[row.agentInfo.name, row.agentInfo.version, row.agentInfo.model].filter(Boolean).join(' · ')}</span
                >`
              : null
          }
        </td>
      </tr>
      <tr>
        <th>attempt</th>
        <td>${row.attempt}</td>
      </tr>
      <tr>
        <th>rewards</th>
        <td id="rewards">
          ${
            result?.rewards
              ? Object.entries(result.rewards).map(
                  ([key, value]) =>
                    html`<span class="chip reward" style=${`background:${rewardColour(value)}`}
                      >${key} ${fmt(value)}</span
                    > `
                )
              : 'none'
          }
        </td>
      </tr>
      <tr>
        <th>error</th>
        <td id="error">
          ${
            result?.error
              ? html`<span class=${`chip ${errorLevel(result.error.type)}`}>${result.error.type}</span>${' in '}
                  <b>${result.error.step}</b>
                  <pre class="message">${result.error.message}</pre>`
              : 'none'
          }
        </td>
      </tr>
      <tr>
        <th>agent exit code</th>
        <td>${result?.agent_exit_code ?? '–'}</td>
      </tr>
      <tr>
        <th>host · image</th>
        <td>${result?.host ?? '–'} · ${result?.image ?? '–'}</td>
      </tr>
      <tr>
        <th>restarts</th>
        <td>${result?.restarts ?? 0}</td>
      </tr>
      ${row.usage ? usageRow(row.usage) : null}
      <tr>
        <th>workflow</th>
        <td>
          ${result?.workflow_id ?? '–'}
          ${uiLink ? html` · <a href=${uiLink} id="temporal-link">open in the Temporal UI</a>` : null}
        </td>
      </tr>
    </tbody>
  </table>`;
}

function usageRow(usage: NonNullable<TrialRow['usage']>): VNode {
  return html`<tr>
    <th>usage</th>
    <td id="usage">
      ${
        `${usage.n_llm_calls ?? '–'} LLM calls · ${usage.input_tokens ?? '–'} input tokens ` +
        `(${usage.cached_tokens ?? 0} cached) · ${usage.output_tokens ?? '–'} output tokens · $${fmt(usage.cost_usd, 4)}`
      }
      ${usage.n_retried_calls ? ` · ${usage.n_retried_calls} retried` : ''}
      ${usage.waited_ms ? ` · waited ${fmt(usage.waited_ms / 1000, 1)} s at the gateway` : ''}
    </td>
  </tr>`;
}

/** Each file of the trial folder: its head when it is text and within the page's bounds, and a download link. */
function filesSection(ctx: LinkContext, { row, jobName, files, moreFiles }: TrialPageData): VNode[] {
  const shown = files.map(
    (file) =>
      html`<details class="file" open=${file.path.endsWith('.txt') || file.path === 'trial.log'}>
        <summary>
          <code>${file.path}</code> <span class="muted">${bytes(file.size)}</span>${' · '}
          <a href=${ctx.file(['jobs', jobName, 'trials', row.trialName, 'files', ...file.path.split('/')])} download
            >download</a
          >
        </summary>
        ${
          file.notShown
            ? html`<p class="muted">not shown here (this page shows the first files only): download it</p>`
            : file.head === undefined
              ? html`<p class="muted">binary file</p>`
              : html`<pre class="file">${file.head}</pre>`
        }
        ${
          file.truncated
            ? html`<p class="muted">showing the first ${bytes(file.head?.length ?? 0)} of ${bytes(file.size)}</p>`
            : null
        }
      </details>`
  );
  if (moreFiles > 0) shown.push(html`<p class="muted">… and ${moreFiles} more files, not listed</p>`);
  return shown;
}

function timeline(result: NonNullable<TrialRow['result']>, calls: LlmCall[]): VNode {
  const start = Date.parse(result.started_at);
  const end = Math.max(Date.parse(result.finished_at), start + 1);
  const span = end - start;
  const row = (step: string, timing: StepTiming | null | undefined, failed: boolean) => {
    if (!timing) return [];
    const from = Date.parse(timing.started_at);
    const to = timing.finished_at ? Date.parse(timing.finished_at) : end;
    return [{ step, from: from - start, duration: Math.max(0, to - from), failed } satisfies StepSpan];
  };
  const taskSteps = result.step_results ?? [];
  // A multi-step task's execute and verify: one row per step of the task.
  const steps = STEPS.flatMap((step) =>
    (step === 'execute' || step === 'verify') && taskSteps.length
      ? taskSteps.flatMap((taskStep) =>
          row(`${step} · ${taskStep.name}`, taskStep[step], taskStep.error?.step === step)
        )
      : row(step, result.steps[step], result.error?.step === step)
  );
  return html`<div id="timeline">
    <h2>Lifecycle <span class="muted">${fmt(span / 1000, 1)} s</span></h2>
    ${trialCharts(result, steps, calls)}
    <table class="timeline">
      <tbody>
        ${steps.map(
          (s) =>
            html`<tr>
              <th>${s.step}</th>
              <td class="num">${fmt(s.from / 1000, 1)} s</td>
              <td class="num">${fmt(s.duration / 1000, 2)} s</td>
            </tr>`
        )}
      </tbody>
    </table>
    ${taskSteps.length ? taskStepsTable(taskSteps) : null}
  </div>`;
}

/** A multi-step task's steps: rewards, and what ended a step early. */
function taskStepsTable(taskSteps: TaskStepResult[]): VNode {
  return html`<table id="task-steps">
    <thead>
      <tr>
        <th>step</th>
        <th>rewards</th>
        <th>error</th>
      </tr>
    </thead>
    <tbody>
      ${taskSteps.map(
        (taskStep) =>
          html`<tr>
            <th>${taskStep.name}</th>
            <td>${taskStep.rewards ? JSON.stringify(taskStep.rewards) : 'none'}</td>
            <td>
              ${taskStep.error ? `${taskStep.error.type}: ${taskStep.error.message}` : ''}${
                taskStep.below_min_reward ? `stopped: ${taskStep.below_min_reward}` : ''
              }
            </td>
          </tr>`
      )}
    </tbody>
  </table>`;
}
