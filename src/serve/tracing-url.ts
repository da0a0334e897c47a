/** The tracing URL Eval Protocol's processor gives a remote server, and the model URL it stands for. */
export const METADATA_KEYS = ['rollout_id', 'invocation_id', 'experiment_id', 'run_id', 'row_id'] as const;
const TRACING_PATH = new RegExp(
  `^(.*?)${METADATA_KEYS.map((key) => `/${key}/[^/]+`).join('')}(?:/encoded_base_url/([A-Za-z0-9_=-]+))?/?$`
);

/**
 * The model URL a rollout's agent should reach, from the /init `model_base_url`: a tracing URL on this very server
 * stands for the model it encodes (`encoded_base_url`, which Eval Protocol adds from `completion_params.base_url`);
 * any other URL is the model's (or another proxy's) and is kept as it is. Throws when the URL names this server
 * and no model.
 */
export function upstreamModelUrl(modelBaseUrl: string, isThisServer: (url: URL) => boolean): string {
  let url: URL;
  try {
    url = new URL(modelBaseUrl);
  } catch {
    return modelBaseUrl;
  }
  if (!isThisServer(url)) return modelBaseUrl;
  const match = TRACING_PATH.exec(url.pathname);
  if (match?.[2]) return Buffer.from(match[2], 'base64url').toString('utf8');
  throw new Error(
    `model_base_url: ${modelBaseUrl} is this server, with no model behind it: give the model's URL, or as ` +
      "Eval Protocol's RemoteRolloutProcessor does, completion_params.base_url (it is encoded into the tracing URL)"
  );
}
