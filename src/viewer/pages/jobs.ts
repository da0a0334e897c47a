/** The jobs page: every job folder under the viewer's root, with status, progress and errors. */
import { historyChart } from '../charts/jobs';
import type { JobSummary } from '../data';
import { errorLevel } from '../data';
import type { LinkContext } from '../html';
import { document, html } from '../html';
import { time } from './shared';

export function jobsPage(ctx: LinkContext, root: string, jobs: JobSummary[]): string {
  const running = jobs.some((job) => job.result?.status === 'running');
  return document(
    'Jobs',
    ctx,
    html`<section>
      <h1>Jobs <span class="muted">in ${root}</span></h1>
      ${jobs.length ? historyChart(jobs) : null}
      ${
        jobs.length === 0
          ? html`<p>No job folders here yet.</p>`
          : html`<table class="sortable" id="jobs">
              <thead>
                <tr>
                  <th>job</th>
                  <th>status</th>
                  <th data-sort-method="number">progress</th>
                  <th data-sort-method="number">completed</th>
                  <th data-sort-method="number">errored</th>
                  <th data-sort-method="number">infrastructure</th>
                  <th data-sort-method="number">cancelled</th>
                  <th>errors by type</th>
                  <th>started</th>
                  <th>finished</th>
                  <th>agents</th>
                  <th>datasets</th>
                </tr>
              </thead>
              <tbody>
                ${jobs.map((job) => {
                  const r = job.result;
                  const total = r?.n_total_trials ?? 0;
                  const finished = r?.n_finished_trials ?? 0;
                  return html`<tr>
                    <td><a href=${ctx.href(['jobs', job.name])}>${job.name}</a></td>
                    <td><span class=${`status ${r?.status ?? 'pending'}`}>${r?.status ?? 'starting'}</span></td>
                    <td data-sort=${total ? finished / total : 0}>
                      <progress max=${total || 1} value=${finished}></progress> ${finished}/${total}
                    </td>
                    <td>${r?.n_completed_trials ?? 0}</td>
                    <td>${r?.n_errored_trials ?? 0}</td>
                    <td>${r?.n_infrastructure_errors ?? 0}</td>
                    <td>${r?.n_cancelled_trials ?? 0}</td>
                    <td>
                      ${Object.entries(r?.errors_by_type ?? {}).map(
                        ([type, n]) => html`<span class=${`chip ${errorLevel(type)}`}>${type} ×${n}</span> `
                      )}
                    </td>
                    <td>${time(r?.started_at)}</td>
                    <td>${time(r?.finished_at)}</td>
                    <td>${(job.config?.agents ?? []).map((a) => a.name).join(', ')}</td>
                    <td>${(job.config?.datasets ?? []).map(datasetName).join(', ')}</td>
                  </tr>`;
                })}
              </tbody>
            </table>`
      }
    </section>`,
    { refresh: running }
  );
}

function datasetName(dataset: { path: string } | { name: string }): string {
  return 'path' in dataset ? (dataset.path.split('/').filter(Boolean).pop() ?? dataset.path) : dataset.name;
}
