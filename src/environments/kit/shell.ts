/**
 * The shell a provider runs task commands in: bash when the image has it (tasks written for Docker's `bash -c`), else
 * sh. Asked once per sandbox and worker process, by a probe through the provider's own exec.
 */

/** The probe's script, under /bin/sh: exit 0 when bash is there. */
export const BASH_PROBE = 'test -x /bin/bash';

export class Shells {
  private readonly known = new Map<string, string>();

  /** The sandbox's shell; `probe` runs BASH_PROBE and gives its exit status (null: it did not end normally). */
  async of(id: string, probe: (script: string) => Promise<number | null>): Promise<string> {
    let shell = this.known.get(id);
    if (!shell) {
      shell = (await probe(BASH_PROBE)) === 0 ? '/bin/bash' : '/bin/sh';
      this.known.set(id, shell);
    }
    return shell;
  }

  /** Known another way (Docker's start prints it). */
  set(id: string, shell: string): void {
    this.known.set(id, shell);
  }

  forget(id: string): void {
    this.known.delete(id);
  }
}
