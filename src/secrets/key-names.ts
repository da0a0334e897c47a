/**
 * Which environment variable names hold secrets, by name: API keys, tokens, passwords, credentials. Used to mask
 * values shown to people (`--print-config`) and, for values long enough not to occur by chance, to redact the
 * worker's own secrets from what leaves it even when no job referenced them.
 */
const SECRET_NAME = /(API_?KEY|_KEY$|^KEY$|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE)/i;
/** Shorter values are left alone: they would be redacted wherever such a word happened to occur. */
const MIN_WORKER_SECRET_LENGTH = 8;

export function isSecretName(name: string): boolean {
  return SECRET_NAME.test(name);
}

/** The values of this environment's secret-named variables (long enough to redact safely). */
export function secretValuesOf(env: NodeJS.ProcessEnv): string[] {
  return Object.entries(env).flatMap(([name, value]) =>
    value !== undefined && value.length >= MIN_WORKER_SECRET_LENGTH && isSecretName(name) ? [value] : []
  );
}

/** A value that names worker variables (`${VAR}`) rather than holding one itself. */
function isReference(value: string): boolean {
  return value.includes('${');
}

/** The literal (not `${VAR}`) values of an env map's secret-named variables: redacted like any secret. */
export function literalSecretValues(env: Record<string, string>): string[] {
  return Object.entries(env).flatMap(([name, value]) =>
    value !== '' && !isReference(value) && isSecretName(name) ? [value] : []
  );
}

export const MASKED = '[REDACTED]';

/** An env map with its literal secret values masked, for showing to people (`--print-config`). */
export function maskedEnv(env: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).map(([name, value]) => [
      name,
      value !== '' && !isReference(value) && isSecretName(name) ? MASKED : value,
    ])
  );
}

/** A `KEY=VALUE` argument (`--ae`'s) with a literal secret value masked; any other text as it is. */
export function maskedAssignment(text: string): string {
  const match = /^(--ae=)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(text);
  if (!match || match[3] === '' || isReference(match[3]!) || !isSecretName(match[2]!)) return text;
  return `${match[1] ?? ''}${match[2]}=${MASKED}`;
}
