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
